//! Cross-check against Wireshark's dissector: for every frame of the RoCE captures, our
//! opcode, PSN, destination QP and extension-header fields must equal tshark's.
//! Skips (and says so) when `tshark` is not installed.

use std::path::PathBuf;
use std::process::Command;

use capture::decode::{decode_all, Outcome};

const FILES: [&str; 7] = [
    "rc_pingpong.pcap",
    "write_bw.pcap",
    "read_bw.pcap",
    "atomic_bw.pcap",
    "ud_pingpong.pcap",
    "rping_cm.pcap",
    "fake_peer.pcap",
];

const FIELDS: [&str; 13] = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.psn",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.padcnt",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "ip.src",
    "ip.dst",
];

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn parse_num(s: &str) -> u64 {
    let s = s.trim();
    match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("{s}: {e}")),
        None => s.parse().unwrap_or_else(|e| panic!("{s}: {e}")),
    }
}

#[test]
fn opcode_psn_qp_and_headers_match_tshark() {
    if !tshark_available() {
        eprintln!(
            "SKIPPED: tshark is not installed (apt-get install tshark to run this cross-check)"
        );
        return;
    }
    let mut compared = 0;
    for name in FILES {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../testdata/captures")
            .join(name);
        let mut cmd = Command::new("tshark");
        cmd.arg("-r")
            .arg(&path)
            .args(["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f"]);
        for f in FIELDS {
            cmd.args(["-e", f]);
        }
        let out = cmd.output().expect("run tshark");
        assert!(
            out.status.success(),
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).expect("utf8");

        let bytes = std::fs::read(&path).expect("read capture");
        let (decoded, _, stop) = decode_all(&bytes).expect("header");
        assert!(stop.is_none());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), decoded.len(), "{name}: frame count");
        for (line, d) in lines.iter().zip(&decoded) {
            let cols: Vec<&str> = line.split('\t').collect();
            assert_eq!(cols.len(), FIELDS.len(), "{name}: {line}");
            let Outcome::Packet(r) = &d.outcome else {
                panic!("{name} frame {} not decoded", d.frame)
            };
            let ctx = format!("{name} frame {}", r.frame);
            assert_eq!(parse_num(cols[0]), r.frame, "{ctx}");
            assert_eq!(parse_num(cols[1]), u64::from(r.opcode), "{ctx}: opcode");
            assert_eq!(parse_num(cols[2]), u64::from(r.psn), "{ctx}: psn");
            assert_eq!(parse_num(cols[3]), u64::from(r.dest_qp), "{ctx}: dest qp");
            assert_eq!(parse_num(cols[4]) != 0, r.ack_req, "{ctx}: ack req");
            assert_eq!(parse_num(cols[5]), u64::from(r.pad), "{ctx}: pad");
            let opt = |s: &str| (!s.is_empty()).then(|| parse_num(s));
            assert_eq!(
                opt(cols[6]),
                r.reth.map(|x| u64::from(x.len)),
                "{ctx}: RETH length"
            );
            assert_eq!(
                opt(cols[7]),
                r.aeth.map(|x| u64::from(x.syndrome)),
                "{ctx}: AETH syndrome"
            );
            assert_eq!(
                opt(cols[8]),
                r.aeth.map(|x| u64::from(x.msn)),
                "{ctx}: AETH MSN"
            );
            assert_eq!(
                opt(cols[9]),
                r.deth.map(|x| u64::from(x.qkey)),
                "{ctx}: DETH Q_Key"
            );
            assert_eq!(
                opt(cols[10]),
                r.deth.map(|x| u64::from(x.src_qp)),
                "{ctx}: DETH src QP"
            );
            assert_eq!(cols[11], r.src.to_string(), "{ctx}: src");
            assert_eq!(cols[12], r.dst.to_string(), "{ctx}: dst");
            compared += 1;
        }
    }
    assert_eq!(compared, 187);
}
