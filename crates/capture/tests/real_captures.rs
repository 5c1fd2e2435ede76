//! Decoding the real Soft-RoCE captures in `testdata/` (recorded with Linux rdma_rxe; see
//! `testdata/captures/README.md`). Expected values come from the README table and from
//! `tshark -T fields` runs over the same files (tshark 4.0.17), quoted next to each check.

use std::path::PathBuf;

use capture::decode::{decode_all, Outcome, Summary};
use capture::frame::{classify, FrameKind};
use capture::{DecodeRecord, Frames, IcrcStatus};

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn read(rel: &str) -> Vec<u8> {
    let path = testdata(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// (file, RoCEv2 packets). Every frame of these captures is RoCEv2 (`udp port 4791` filter).
const ROCE_CAPTURES: [(&str, u64); 7] = [
    ("captures/rc_pingpong.pcap", 30),
    ("captures/write_bw.pcap", 40),
    ("captures/read_bw.pcap", 40),
    ("captures/atomic_bw.pcap", 20),
    ("captures/ud_pingpong.pcap", 10),
    ("captures/rping_cm.pcap", 41),
    ("captures/fake_peer.pcap", 6),
];

/// (file, frames). TCP-only perftest/pingpong exchange captures: no RoCEv2 at all.
const EXCHANGE_CAPTURES: [(&str, u64); 30] = [
    ("exchange-captures/fake_client_write_bw_full.pcap", 41),
    (
        "exchange-captures/fake_server_vs_real_client_write_bw.pcap",
        24,
    ),
    ("exchange-captures/mtu_512_from_peer.pcap", 20),
    ("exchange-captures/mtu_invalid_from_peer.pcap", 20),
    ("exchange-captures/neg_dont_xchg_versions.pcap", 7),
    ("exchange-captures/neg_gid_type_mismatch.pcap", 21),
    ("exchange-captures/neg_short_keymsg.pcap", 19),
    ("exchange-captures/neg_short_version.pcap", 9),
    ("exchange-captures/neg_version_5.60.pcap", 11),
    ("exchange-captures/pp_rc.pcap", 11),
    ("exchange-captures/pp_srq.pcap", 73),
    ("exchange-captures/pp_ud.pcap", 11),
    ("exchange-captures/pt_atomic_bw.pcap", 40),
    ("exchange-captures/pt_read_bw.pcap", 39),
    ("exchange-captures/pt_read_bw_bidir.pcap", 41),
    ("exchange-captures/pt_read_lat.pcap", 29),
    ("exchange-captures/pt_send_bw.pcap", 29),
    ("exchange-captures/pt_send_bw_all_ud.pcap", 89),
    ("exchange-captures/pt_send_bw_bidir.pcap", 39),
    ("exchange-captures/pt_send_bw_events.pcap", 31),
    ("exchange-captures/pt_send_bw_ud.pcap", 31),
    ("exchange-captures/pt_send_lat.pcap", 33),
    ("exchange-captures/pt_write_bw.pcap", 40),
    ("exchange-captures/pt_write_bw_all.pcap", 42),
    ("exchange-captures/pt_write_bw_bidir.pcap", 38),
    ("exchange-captures/pt_write_bw_gbits.pcap", 40),
    ("exchange-captures/pt_write_bw_no_x.pcap", 39),
    ("exchange-captures/pt_write_bw_postlist.pcap", 39),
    ("exchange-captures/pt_write_bw_q2.pcap", 43),
    ("exchange-captures/pt_write_lat.pcap", 25),
];

/// Every decode record of a capture that must read cleanly to the end.
fn records(rel: &str) -> (Vec<DecodeRecord>, Summary) {
    let bytes = read(rel);
    let (decoded, summary, stop) = decode_all(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
    assert!(stop.is_none(), "{rel}: stopped early: {stop:?}");
    let mut out = Vec::new();
    for d in decoded {
        match d.outcome {
            Outcome::Packet(r) => out.push(r),
            other => panic!("{rel}: frame {} did not decode: {other:?}", d.frame),
        }
    }
    (out, summary)
}

#[test]
fn every_roce_capture_decodes_completely_with_exact_counts() {
    for (rel, packets) in ROCE_CAPTURES {
        let (recs, summary) = records(rel);
        let bad = u64::from(rel.ends_with("fake_peer.pcap"));
        assert_eq!(
            summary,
            Summary {
                frames: packets,
                packets,
                not_roce: 0,
                garbled: 0,
                bad_icrc: bad
            },
            "{rel}"
        );
        assert_eq!(recs.len() as u64, packets, "{rel}");
        for (i, r) in recs.iter().enumerate() {
            assert_eq!(r.frame, i as u64 + 1, "{rel}: frames are numbered from 1");
        }
    }
}

#[test]
fn every_icrc_verifies_except_fake_peer_frame_4() {
    for (rel, _) in ROCE_CAPTURES {
        let (recs, _) = records(rel);
        for r in &recs {
            let expect_bad = rel.ends_with("fake_peer.pcap") && r.frame == 4;
            let want = if expect_bad {
                IcrcStatus::Bad
            } else {
                IcrcStatus::Ok
            };
            assert_eq!(r.icrc, want, "{rel} frame {}", r.frame);
        }
    }
}

#[test]
fn exchange_captures_hold_no_roce_and_are_skipped_not_garbled() {
    for (rel, frames) in EXCHANGE_CAPTURES {
        let bytes = read(rel);
        let (decoded, summary, stop) = decode_all(&bytes).unwrap_or_else(|e| panic!("{rel}: {e}"));
        assert!(stop.is_none(), "{rel}: {stop:?}");
        assert_eq!(
            summary,
            Summary {
                frames,
                packets: 0,
                not_roce: frames,
                garbled: 0,
                bad_icrc: 0
            },
            "{rel}"
        );
        // They are TCP (protocol 6) to/from port 18515.
        for d in &decoded {
            assert_eq!(
                d.outcome,
                Outcome::NotRoce(capture::NotRoce::NotUdp { protocol: 6 }),
                "{rel} frame {}",
                d.frame
            );
        }
    }
}

/// Parsing then re-emitting with `wire::frame::build_l3` gives back the captured L3 bytes:
/// nothing is lost or normalised by the parser (IPv4 ID/DF, TTL, UDP checksum, BTH reserved
/// bits, pad), and the builder computes the same IPv4 checksum and ICRC as rxe.
#[test]
fn reemitting_every_packet_reproduces_the_l3_bytes() {
    let mut checked = 0;
    for (rel, _) in ROCE_CAPTURES {
        let bytes = read(rel);
        let frames = Frames::new(&bytes[..]).expect("pcap header");
        for frame in frames {
            let frame = frame.expect("record");
            let FrameKind::Roce(roce) = classify(frame.link_type, &frame.data, frame.orig_len)
            else {
                panic!("{rel} frame {} is not RoCE", frame.number);
            };
            let mut buf = vec![0u8; roce.l3.len() + 64];
            let n = wire::frame::build_l3(
                &roce.parsed.ip,
                &roce.parsed.udp,
                &roce.parsed.packet,
                &mut buf,
            )
            .unwrap_or_else(|e| panic!("{rel} frame {}: build_l3: {e}", frame.number));
            let built = &buf[..n];
            assert_eq!(n, roce.l3.len(), "{rel} frame {}", frame.number);
            let body = n - 4;
            assert_eq!(
                built[..body],
                roce.l3[..body],
                "{rel} frame {}: headers+payload",
                frame.number
            );
            if roce.parsed.icrc_ok {
                assert_eq!(
                    built[body..],
                    roce.l3[body..],
                    "{rel} frame {}: ICRC",
                    frame.number
                );
            } else {
                // The corrupted ICRC of fake_peer frame 4: the builder writes the right one.
                assert_ne!(
                    built[body..],
                    roce.l3[body..],
                    "{rel} frame {}",
                    frame.number
                );
                assert_eq!(
                    u32::from_le_bytes(roce.l3[body..].try_into().expect("4")),
                    roce.parsed.icrc_wire
                );
            }
            checked += 1;
        }
    }
    assert_eq!(checked, 30 + 40 + 40 + 20 + 10 + 41 + 6);
}

fn get(recs: &[DecodeRecord], frame: u64) -> &DecodeRecord {
    recs.iter()
        .find(|r| r.frame == frame)
        .expect("frame present")
}

#[test]
fn write_bw_fields() {
    // ib_write_bw -s 3000 with path MTU 1024: FIRST(RETH)/MIDDLE/LAST = 1024/1024/952,
    // 10 messages, then 10 ACKs. tshark frame 1: opcode 6, destqp 0x000051, psn 7552745,
    // RETH va 0x0000563071a94000 r_key 0x0000423c dmalen 3000.
    let (recs, _) = records("captures/write_bw.pcap");
    let psn0 = 7_552_745u32;
    for m in 0..10u32 {
        for (k, (op, name, len)) in [
            (6u8, "RC_RDMA_WRITE_FIRST", 1024usize),
            (7, "RC_RDMA_WRITE_MIDDLE", 1024),
            (8, "RC_RDMA_WRITE_LAST", 952),
        ]
        .into_iter()
        .enumerate()
        {
            let f = u64::from(m * 3) + k as u64 + 1;
            let r = get(&recs, f);
            assert_eq!(
                (r.opcode, r.opcode_name.as_str(), r.payload_len),
                (op, name, len),
                "frame {f}"
            );
            assert_eq!(r.psn, psn0 + m * 3 + k as u32);
            assert_eq!(r.dest_qp, 0x51);
            assert_eq!(r.src.to_string(), "10.77.0.12");
            assert_eq!(r.dst.to_string(), "10.77.0.11");
            assert_eq!(
                r.ack_req,
                k == 2,
                "AckReq on the LAST packet only (frame {f})"
            );
            assert!(!r.se);
            assert_eq!(r.pad, 0);
            if k == 0 {
                let reth = r.reth.expect("RETH on FIRST");
                assert_eq!(
                    (reth.va, reth.rkey, reth.len),
                    (0x0000_5630_71a9_4000, 0x423c, 3000)
                );
            } else {
                assert!(r.reth.is_none());
            }
            assert!(r.aeth.is_none() && r.deth.is_none() && r.immdt.is_none());
        }
    }
    for m in 0..10u32 {
        let r = get(&recs, 31 + u64::from(m));
        assert_eq!(r.opcode_name, "RC_ACKNOWLEDGE");
        assert_eq!(
            (r.dest_qp, r.psn, r.payload_len),
            (0x2b, psn0 + 2 + 3 * m, 0)
        );
        let aeth = r.aeth.expect("AETH");
        assert_eq!((aeth.syndrome, aeth.msn), (0x1f, m + 1));
    }
}

#[test]
fn read_bw_fields() {
    // READ_REQUEST (RETH len 3000) reserves 3 PSNs; responses FIRST(AETH)/MIDDLE/LAST(AETH).
    let (recs, _) = records("captures/read_bw.pcap");
    let psn0 = 593_067u32;
    for m in 0..10u32 {
        let r = get(&recs, u64::from(m) + 1);
        assert_eq!(r.opcode_name, "RC_RDMA_READ_REQUEST");
        assert_eq!(
            (r.opcode, r.psn, r.dest_qp, r.payload_len),
            (12, psn0 + 3 * m, 0x52, 0)
        );
        assert!(r.ack_req);
        let reth = r.reth.expect("RETH");
        assert_eq!(
            (reth.va, reth.rkey, reth.len),
            (0x0000_55d1_70dc_b000, 0x4368, 3000)
        );
    }
    for i in 0..30u32 {
        let r = get(&recs, 11 + u64::from(i));
        let (name, len, aeth) = match i % 3 {
            0 => ("RC_RDMA_READ_RESPONSE_FIRST", 1024, true),
            1 => ("RC_RDMA_READ_RESPONSE_MIDDLE", 1024, false),
            _ => ("RC_RDMA_READ_RESPONSE_LAST", 952, true),
        };
        assert_eq!(
            (r.opcode_name.as_str(), r.payload_len, r.psn, r.dest_qp),
            (name, len, psn0 + i, 0x2c)
        );
        assert_eq!(r.aeth.is_some(), aeth, "frame {}", r.frame);
        if let Some(a) = r.aeth {
            assert_eq!((a.syndrome, a.msn), (0x1f, i / 3 + 1));
        }
    }
}

#[test]
fn atomic_bw_fields() {
    // FETCH_ADD: AtomicETH va 0x0000560220b37000 + 0x40·n, r_key 0x442d, add 1.
    // ATOMIC_ACKNOWLEDGE: AETH 0x1f/msn n+1, AtomicAckETH original data (tshark origremdt).
    let (recs, _) = records("captures/atomic_bw.pcap");
    for n in 0..10u64 {
        let r = get(&recs, n + 1);
        assert_eq!((r.opcode, r.opcode_name.as_str()), (0x14, "RC_FETCH_ADD"));
        assert_eq!(
            (r.dest_qp, r.psn, r.payload_len),
            (0x53, 12_379_200 + n as u32, 0)
        );
        let a = r.atomic_eth.expect("AtomicETH");
        assert_eq!(
            (a.va, a.rkey, a.swap_add),
            (0x0000_5602_20b3_7000 + 0x40 * n, 0x442d, 1)
        );
        assert!(r.reth.is_none());
    }
    let orig = [
        7725813225890732378u64,
        6307091186405257066,
        6401103491027369078,
    ];
    for (n, want) in orig.into_iter().enumerate() {
        let r = get(&recs, 11 + n as u64);
        assert_eq!(
            (r.opcode, r.opcode_name.as_str()),
            (0x12, "RC_ATOMIC_ACKNOWLEDGE")
        );
        assert_eq!(r.atomic_ack.expect("AtomicAckETH").orig, want);
        assert_eq!(r.aeth.expect("AETH").msn, n as u32 + 1);
    }
    assert_eq!(
        get(&recs, 14).atomic_ack.expect("ack").orig,
        14517395894140862996
    );
}

#[test]
fn ud_and_cm_fields() {
    // ibv_ud_pingpong -s 512: UD SEND_ONLY, DETH Q_Key 0x11111111, 512-byte payload.
    let (recs, _) = records("captures/ud_pingpong.pcap");
    for r in &recs {
        assert_eq!(
            (r.opcode, r.opcode_name.as_str(), r.payload_len),
            (0x64, "UD_SEND_ONLY", 512)
        );
        let d = r.deth.expect("DETH");
        assert_eq!(d.qkey, 0x1111_1111);
        let (qp, src_qp) = if r.frame % 2 == 1 {
            (0x55, 0x2f)
        } else {
            (0x2f, 0x55)
        };
        assert_eq!((r.dest_qp, d.src_qp), (qp, src_qp), "frame {}", r.frame);
    }
    // rping: CM MADs to QP1 (GSI Q_Key 0x80010000, 256-byte MAD), then RC traffic.
    let (recs, _) = records("captures/rping_cm.pcap");
    for f in [1, 2, 3, 40, 41] {
        let r = get(&recs, f);
        assert_eq!(
            (r.opcode_name.as_str(), r.dest_qp, r.payload_len),
            ("UD_SEND_ONLY", 1, 256)
        );
        let d = r.deth.expect("DETH");
        assert_eq!((d.qkey, d.src_qp), (0x8001_0000, 1));
    }
    let r = get(&recs, 6);
    assert_eq!(r.opcode_name, "RC_RDMA_READ_REQUEST");
    assert_eq!(
        r.reth.map(|x| (x.va, x.rkey, x.len)),
        Some((0x0000_55ee_4df6_1840, 0x240c, 100))
    );
    let r = get(&recs, 7);
    assert_eq!(
        (r.opcode_name.as_str(), r.payload_len),
        ("RC_RDMA_READ_RESPONSE_ONLY", 100)
    );
    assert_eq!(r.aeth.map(|a| (a.syndrome, a.msn)), Some((0x1f, 1)));
    let r = get(&recs, 12);
    assert_eq!(
        (r.opcode_name.as_str(), r.payload_len),
        ("RC_RDMA_WRITE_ONLY", 100)
    );
    assert_eq!(
        r.reth.map(|x| (x.va, x.rkey, x.len)),
        Some((0x0000_55ee_4df6_1020, 0x237f, 100))
    );
    let r = get(&recs, 4);
    assert_eq!(
        (r.opcode_name.as_str(), r.psn, r.dest_qp),
        ("RC_SEND_ONLY", 7_857_452, 0x56)
    );
}

#[test]
fn rc_pingpong_and_fake_peer_fields() {
    // -s 2048 over MTU 1024: SEND_FIRST + SEND_LAST of 1024 bytes each, then an ACK.
    let (recs, _) = records("captures/rc_pingpong.pcap");
    for (i, r) in recs.iter().enumerate() {
        let (name, len) = match i % 3 {
            0 => ("RC_SEND_FIRST", 1024),
            1 => ("RC_SEND_LAST", 1024),
            _ => ("RC_ACKNOWLEDGE", 0),
        };
        assert_eq!(
            (r.opcode_name.as_str(), r.payload_len),
            (name, len),
            "frame {}",
            r.frame
        );
    }
    assert_eq!(
        (get(&recs, 1).psn, get(&recs, 1).dest_qp),
        (16_268_866, 0x50)
    );
    assert_eq!(get(&recs, 30).aeth.map(|a| a.msn), Some(5));

    let (recs, _) = records("captures/fake_peer.pcap");
    let r = get(&recs, 1);
    assert_eq!(
        (r.opcode_name.as_str(), r.dest_qp, r.psn, r.payload_len),
        ("RC_SEND_ONLY", 0x0abcde, 10_038_896, 64)
    );
    assert_eq!(r.dst.to_string(), "10.77.0.1");
    assert_eq!(
        get(&recs, 3).src.to_string(),
        "10.77.0.2",
        "frame 3 comes from the wrong source"
    );
    // Our SENDs: 94-byte frames = Eth 14 + IPv4 20 + UDP 8 + BTH 12 + 36 payload + ICRC 4.
    for f in [3, 4, 5] {
        let r = get(&recs, f);
        assert_eq!(
            (r.opcode_name.as_str(), r.dest_qp, r.psn, r.payload_len),
            ("RC_SEND_ONLY", 0x31, 4_728_869, 36)
        );
    }
    assert_eq!(get(&recs, 4).icrc, IcrcStatus::Bad);
    assert_eq!(
        get(&recs, 6).aeth.map(|a| (a.syndrome, a.msn)),
        Some((0x1f, 1))
    );
}

#[test]
fn json_keys_are_exactly_the_documented_ones() {
    for (rel, _) in ROCE_CAPTURES {
        let (recs, _) = records(rel);
        for r in &recs {
            let value: serde_json::Value = serde_json::from_str(&r.to_json()).expect("json");
            let obj = value.as_object().expect("object");
            for key in capture::decode::JSON_KEYS_ALWAYS {
                assert!(
                    obj.contains_key(key),
                    "{rel} frame {}: missing {key}",
                    r.frame
                );
            }
            for key in obj.keys() {
                assert!(
                    capture::decode::JSON_KEYS.contains(&key.as_str()),
                    "{rel}: unexpected key {key}"
                );
            }
            assert_eq!(obj.contains_key("reth"), r.reth.is_some());
            assert_eq!(obj.contains_key("aeth"), r.aeth.is_some());
            assert_eq!(obj.contains_key("deth"), r.deth.is_some());
            assert_eq!(obj.contains_key("atomic_eth"), r.atomic_eth.is_some());
            assert_eq!(obj.contains_key("atomic_ack"), r.atomic_ack.is_some());
            assert!(obj["frame"].is_u64() && obj["psn"].is_u64() && obj["dest_qp"].is_u64());
            assert!(obj["ack_req"].is_boolean() && obj["se"].is_boolean());
            assert_eq!(
                obj["icrc"],
                if r.icrc == IcrcStatus::Ok {
                    "ok"
                } else {
                    "bad"
                }
            );
            let back: DecodeRecord = serde_json::from_value(value).expect("round trip");
            assert_eq!(&back, r);
        }
    }
}
