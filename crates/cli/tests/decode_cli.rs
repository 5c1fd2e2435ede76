//! `uroce decode` as a user runs it: the built binary on the real captures in `testdata/`.

use std::path::PathBuf;
use std::process::{Command, Output};

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata")
        .join(rel)
}

fn uroce(args: &[&str], file: &std::path::Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("decode")
        .args(args)
        .arg(file)
        .output()
        .expect("run uroce")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).expect("utf8 stdout")
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).expect("utf8 stderr")
}

fn tmp(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("decode_cli_{}_{name}", std::process::id()))
}

/// (capture, RoCEv2 packets, bad ICRCs).
const CAPTURES: [(&str, usize, usize); 7] = [
    ("captures/rc_pingpong.pcap", 30, 0),
    ("captures/write_bw.pcap", 40, 0),
    ("captures/read_bw.pcap", 40, 0),
    ("captures/atomic_bw.pcap", 20, 0),
    ("captures/ud_pingpong.pcap", 10, 0),
    ("captures/rping_cm.pcap", 41, 0),
    ("captures/fake_peer.pcap", 6, 1),
];

const ALWAYS: [&str; 12] = [
    "frame",
    "src",
    "dst",
    "opcode",
    "opcode_name",
    "dest_qp",
    "psn",
    "ack_req",
    "se",
    "pad",
    "payload_len",
    "icrc",
];
const OPTIONAL: [&str; 7] = [
    "reth",
    "aeth",
    "deth",
    "atomic_eth",
    "atomic_ack",
    "immdt",
    "ieth",
];

#[test]
fn text_output_write_bw() {
    let o = uroce(&[], &testdata("captures/write_bw.pcap"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stderr(&o), "", "nothing on stderr for a clean capture");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 41, "40 packets + summary");
    assert_eq!(
        lines[0],
        "   1 10.77.0.12 -> 10.77.0.11  RC_RDMA_WRITE_FIRST  qp=0x000051 psn=0x733ee9  \
         reth(va=0x563071a94000 rkey=0x423c len=3000)  len=1024 icrc=ok"
    );
    assert_eq!(lines[1], "   2 10.77.0.12 -> 10.77.0.11  RC_RDMA_WRITE_MIDDLE  qp=0x000051 psn=0x733eea  len=1024 icrc=ok");
    assert_eq!(
        lines[2],
        "   3 10.77.0.12 -> 10.77.0.11  RC_RDMA_WRITE_LAST  qp=0x000051 psn=0x733eeb ack_req  len=952 icrc=ok"
    );
    assert_eq!(
        lines[30],
        "  31 10.77.0.11 -> 10.77.0.12  RC_ACKNOWLEDGE  qp=0x00002b psn=0x733eeb  aeth(0x1f ACK credit=31 msn=1)  len=0 icrc=ok"
    );
    assert_eq!(
        lines[40],
        "40 frames: 40 RoCEv2 packets decoded, 0 non-RoCE frames skipped, 0 garbled, 0 bad ICRC"
    );
}

#[test]
fn text_output_other_headers() {
    let o = uroce(&[], &testdata("captures/atomic_bw.pcap"));
    assert!(o.status.success());
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        "   1 10.77.0.12 -> 10.77.0.11  RC_FETCH_ADD  qp=0x000053 psn=0xbce440 ack_req  \
         atomic_eth(va=0x560220b37000 rkey=0x442d swap_add=0x1 compare=0x0)  len=0 icrc=ok"
    );
    assert!(
        lines[10].contains("RC_ATOMIC_ACKNOWLEDGE")
            && lines[10].contains("atomic_ack(orig=0x6b379a32223b595a)"),
        "{}",
        lines[10]
    );

    let o = uroce(&[], &testdata("captures/rping_cm.pcap"));
    let out = stdout(&o);
    assert!(
        out.lines().next().expect("line").contains("UD_SEND_ONLY  qp=0x000001 psn=0x000000 ack_req  deth(qkey=0x80010000 src_qp=0x000001)  len=256 icrc=ok"),
        "{out}"
    );
}

#[test]
fn bad_icrc_is_reported_and_exit_is_zero() {
    let o = uroce(&[], &testdata("captures/fake_peer.pcap"));
    assert!(o.status.success(), "bad ICRCs are findings, not failures");
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7);
    assert!(
        lines[3].starts_with("   4 10.77.0.1 -> 10.77.0.12  RC_SEND_ONLY")
            && lines[3].ends_with("len=36 icrc=bad"),
        "{}",
        lines[3]
    );
    for (i, l) in lines[..6].iter().enumerate() {
        if i != 3 {
            assert!(l.ends_with("icrc=ok"), "{l}");
        }
    }
    assert_eq!(
        lines[6],
        "6 frames: 6 RoCEv2 packets decoded, 0 non-RoCE frames skipped, 0 garbled, 1 bad ICRC"
    );
}

/// The keys of a JSON object, sorted.
fn keys(v: &serde_json::Value) -> Vec<String> {
    let mut k: Vec<String> = v.as_object().expect("object").keys().cloned().collect();
    k.sort();
    k
}

fn sorted(k: &[&str]) -> Vec<String> {
    let mut k: Vec<String> = k.iter().map(|s| s.to_string()).collect();
    k.sort();
    k
}

#[test]
fn json_lines_have_exactly_the_documented_keys() {
    for (rel, packets, bad) in CAPTURES {
        let o = uroce(&["--json"], &testdata(rel));
        assert!(o.status.success(), "{rel}: {}", stderr(&o));
        let out = stdout(&o);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines.len(),
            packets,
            "{rel}: one object per packet, nothing else"
        );
        let mut bad_seen = 0;
        for (i, line) in lines.iter().enumerate() {
            let v: serde_json::Value =
                serde_json::from_str(line).unwrap_or_else(|e| panic!("{rel}: {e}: {line}"));
            let obj = v.as_object().expect("object");
            for k in ALWAYS {
                assert!(obj.contains_key(k), "{rel}: missing {k} in {line}");
            }
            for k in obj.keys() {
                assert!(
                    ALWAYS.contains(&k.as_str()) || OPTIONAL.contains(&k.as_str()),
                    "{rel}: stray key {k}"
                );
            }
            assert_eq!(obj["frame"].as_u64(), Some(i as u64 + 1));
            for k in ["opcode", "dest_qp", "psn", "pad", "payload_len"] {
                assert!(obj[k].is_u64(), "{rel}: {k} must be an integer: {line}");
            }
            for k in ["src", "dst", "opcode_name", "icrc"] {
                assert!(obj[k].is_string(), "{rel}: {k} must be a string");
            }
            if obj["icrc"] == "bad" {
                bad_seen += 1;
            } else {
                assert_eq!(obj["icrc"], "ok");
            }
            let name = obj["opcode_name"].as_str().expect("name");
            // Extension headers appear exactly when the opcode carries them (docs/wire.md §2.1).
            let has_reth = matches!(
                name,
                "RC_RDMA_WRITE_FIRST" | "RC_RDMA_WRITE_ONLY" | "RC_RDMA_READ_REQUEST"
            );
            assert_eq!(obj.contains_key("reth"), has_reth, "{rel}: {line}");
            if has_reth {
                assert_eq!(keys(&obj["reth"]), sorted(&["va", "rkey", "len"]));
            }
            let has_aeth = matches!(
                name,
                "RC_ACKNOWLEDGE"
                    | "RC_ATOMIC_ACKNOWLEDGE"
                    | "RC_RDMA_READ_RESPONSE_FIRST"
                    | "RC_RDMA_READ_RESPONSE_LAST"
                    | "RC_RDMA_READ_RESPONSE_ONLY"
            );
            assert_eq!(obj.contains_key("aeth"), has_aeth, "{rel}: {line}");
            if has_aeth {
                assert_eq!(keys(&obj["aeth"]), sorted(&["syndrome", "msn"]));
            }
            assert_eq!(
                obj.contains_key("deth"),
                name.starts_with("UD_"),
                "{rel}: {line}"
            );
            if let Some(deth) = obj.get("deth") {
                assert_eq!(keys(deth), sorted(&["qkey", "src_qp"]));
            }
            assert_eq!(
                obj.contains_key("atomic_eth"),
                name == "RC_FETCH_ADD",
                "{rel}: {line}"
            );
            if let Some(a) = obj.get("atomic_eth") {
                assert_eq!(keys(a), sorted(&["va", "rkey", "swap_add", "compare"]));
                assert!(a["va"].is_u64() && a["swap_add"].is_u64() && a["compare"].is_u64());
            }
            assert_eq!(
                obj.contains_key("atomic_ack"),
                name == "RC_ATOMIC_ACKNOWLEDGE",
                "{rel}: {line}"
            );
            if let Some(a) = obj.get("atomic_ack") {
                assert!(a["orig"].is_u64());
            }
            assert!(
                !obj.contains_key("immdt") && !obj.contains_key("ieth"),
                "none in these captures"
            );
        }
        assert_eq!(bad_seen, bad, "{rel}");
        let err = stderr(&o);
        assert_eq!(
            err.trim_end(),
            format!("{packets} frames: {packets} RoCEv2 packets decoded, 0 non-RoCE frames skipped, 0 garbled, {bad} bad ICRC"),
            "{rel}: the summary goes to stderr in --json mode"
        );
    }
}

#[test]
fn json_values_match_text() {
    let o = uroce(&["--json"], &testdata("captures/write_bw.pcap"));
    let out = stdout(&o);
    let first: serde_json::Value =
        serde_json::from_str(out.lines().next().expect("line")).expect("json");
    assert_eq!(
        first,
        serde_json::json!({
            "frame": 1, "src": "10.77.0.12", "dst": "10.77.0.11", "opcode": 6,
            "opcode_name": "RC_RDMA_WRITE_FIRST", "dest_qp": 0x51, "psn": 7552745,
            "ack_req": false, "se": false, "pad": 0, "payload_len": 1024, "icrc": "ok",
            "reth": { "va": 0x0000_5630_71a9_4000_u64, "rkey": 0x423c, "len": 3000 }
        })
    );
}

#[test]
fn tcp_only_capture_is_all_skipped() {
    let o = uroce(&[], &testdata("exchange-captures/pt_write_bw.pcap"));
    assert!(o.status.success());
    assert_eq!(
        stdout(&o),
        "40 frames: 0 RoCEv2 packets decoded, 40 non-RoCE frames skipped, 0 garbled, 0 bad ICRC\n"
    );
    let o = uroce(&["--json"], &testdata("exchange-captures/pt_write_bw.pcap"));
    assert!(o.status.success());
    assert_eq!(stdout(&o), "", "no packets, no JSON");
}

#[test]
fn garbage_and_missing_files_fail_clearly() {
    let garbage = tmp("garbage.pcap");
    std::fs::write(&garbage, b"this is not a pcap file, just some text\n").expect("write");
    for args in [&[][..], &["--json"][..]] {
        let o = uroce(args, &garbage);
        assert_eq!(o.status.code(), Some(2));
        assert_eq!(stdout(&o), "");
        let err = stderr(&o);
        assert!(
            err.contains("cannot read") && err.contains("not a pcap file"),
            "{err}"
        );
    }
    let empty = tmp("empty.pcap");
    std::fs::write(&empty, b"").expect("write");
    let o = uroce(&[], &empty);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("only 0 bytes"), "{}", stderr(&o));

    let o = uroce(&[], &tmp("does-not-exist.pcap"));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("cannot open"), "{}", stderr(&o));
    let _ = std::fs::remove_file(garbage);
    let _ = std::fs::remove_file(empty);
}

#[test]
fn truncated_capture_prints_what_it_can_then_fails() {
    let whole = std::fs::read(testdata("captures/write_bw.pcap")).expect("read");
    // Frames 1–3 are 1098 + 1082 + 1010 bytes; cut 100 bytes into frame 4's data.
    let cut = 24 + (16 + 1098) + (16 + 1082) + (16 + 1010) + 16 + 100;
    let path = tmp("truncated.pcap");
    std::fs::write(&path, &whole[..cut]).expect("write");
    for json in [false, true] {
        let o = uroce(if json { &["--json"][..] } else { &[][..] }, &path);
        assert_eq!(o.status.code(), Some(1), "damaged part-way: exit 1");
        let out = stdout(&o);
        let err = stderr(&o);
        assert!(
            err.contains("file truncated: record 4 has 100 of 1098 captured bytes"),
            "{err}"
        );
        let summary =
            "3 frames: 3 RoCEv2 packets decoded, 0 non-RoCE frames skipped, 0 garbled, 0 bad ICRC";
        if json {
            assert_eq!(out.lines().count(), 3);
            assert!(err.contains(summary), "{err}");
        } else {
            assert_eq!(out.lines().count(), 4);
            assert_eq!(out.lines().last(), Some(summary));
        }
    }
    let _ = std::fs::remove_file(path);
}

#[test]
fn garbled_frames_go_to_stderr_with_frame_number() {
    let whole = std::fs::read(testdata("captures/fake_peer.pcap")).expect("read");
    let mut bytes = whole.clone();
    // Frame 1 starts at 24 + 16; its BTH opcode is at 14 + 20 + 8 into the frame.
    bytes[40 + 42] = 0x15; // reserved RC opcode
    let path = tmp("garbled.pcap");
    std::fs::write(&path, &bytes).expect("write");
    let o = uroce(&[], &path);
    assert!(o.status.success());
    assert_eq!(
        stderr(&o),
        "uroce: frame 1: garbled: malformed RoCEv2 packet: unknown BTH opcode\n"
    );
    let out = stdout(&o);
    assert_eq!(out.lines().count(), 6);
    assert!(out.lines().next().expect("line").starts_with("   2 "));
    assert!(out.ends_with("6 frames: 5 RoCEv2 packets decoded, 0 non-RoCE frames skipped, 1 garbled, 1 bad ICRC\n"), "{out}");
    let _ = std::fs::remove_file(path);
}
