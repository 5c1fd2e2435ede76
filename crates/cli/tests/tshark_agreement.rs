//! `uroce decode --json` against Wireshark's dissector.
//!
//! For every `*.pcap` under `testdata/` (all subdirectories), this runs the built
//! `uroce decode --json FILE` and `tshark -r FILE -T fields ...` and checks, packet by packet,
//! that both see RoCEv2 in the same frames and agree on the BTH (opcode, SE, AckReq, pad count,
//! destination QP, PSN) and on every field of the RETH, AETH, DETH, AtomicETH, AtomicAckETH,
//! ImmDt and IETH. Only these transport fields are compared: tshark also dissects CM MADs and
//! guesses at SEND payloads, and those extra layers are none of this test's business.
//!
//! tshark 4.0 shows the ICRC but does not verify it, so the ICRC verdict is checked against
//! what the captures' READMEs record instead: every packet is `ok` except the ones listed in
//! [`KNOWN_BAD_ICRC`].
//!
//! Without tshark the test prints why and passes; with tshark, a `uroce decode` that fails or
//! prints anything but JSON Lines fails it. Every disagreement is listed (file, frame, field,
//! both values) before the test fails.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Packets whose ICRC is wrong on purpose: (capture relative to `testdata/`, frame number).
/// `captures/README.md`: frame 4 of `fake_peer.pcap` is corrupted on purpose.
const KNOWN_BAD_ICRC: [(&str, u64); 1] = [("captures/fake_peer.pcap", 4)];

/// How tshark prints a field with `-T fields`.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// An integer, in decimal or as `0x` hex (per the field's display base).
    Int,
    /// A boolean: `1`/`0` (tshark 4.0) or `True`/`False` (newer).
    Bool,
    /// Raw bytes as hex digits, read as one big-endian integer (ImmDt, IETH).
    Bytes,
}

/// One compared field: its tshark name, how tshark prints it, and where `decode --json` puts
/// it (alternative JSON paths; the first one present is used).
struct Field {
    tshark: &'static str,
    kind: Kind,
    json: &'static [&'static [&'static str]],
}

const fn field(
    tshark: &'static str,
    kind: Kind,
    json: &'static [&'static [&'static str]],
) -> Field {
    Field { tshark, kind, json }
}

/// The compared fields (names from `tshark -G fields`, Wireshark 4.0).
const FIELDS: [Field; 18] = [
    field("infiniband.bth.opcode", Kind::Int, &[&["opcode"]]),
    field("infiniband.bth.se", Kind::Bool, &[&["se"]]),
    field("infiniband.bth.a", Kind::Bool, &[&["ack_req"]]),
    field("infiniband.bth.padcnt", Kind::Int, &[&["pad"]]),
    field("infiniband.bth.destqp", Kind::Int, &[&["dest_qp"]]),
    field("infiniband.bth.psn", Kind::Int, &[&["psn"]]),
    // Wireshark shows the AtomicETH's VA and R_Key with the RETH's fields (one header field
    // serves both headers), so these two stand for either header.
    field(
        "infiniband.reth.va",
        Kind::Int,
        &[&["reth", "va"], &["atomic_eth", "va"]],
    ),
    field(
        "infiniband.reth.r_key",
        Kind::Int,
        &[&["reth", "rkey"], &["atomic_eth", "rkey"]],
    ),
    field("infiniband.reth.dmalen", Kind::Int, &[&["reth", "len"]]),
    field(
        "infiniband.aeth.syndrome",
        Kind::Int,
        &[&["aeth", "syndrome"]],
    ),
    field("infiniband.aeth.msn", Kind::Int, &[&["aeth", "msn"]]),
    field("infiniband.deth.q_key", Kind::Int, &[&["deth", "qkey"]]),
    field("infiniband.deth.srcqp", Kind::Int, &[&["deth", "src_qp"]]),
    field(
        "infiniband.atomiceth.swapdt",
        Kind::Int,
        &[&["atomic_eth", "swap_add"]],
    ),
    field(
        "infiniband.atomiceth.cmpdt",
        Kind::Int,
        &[&["atomic_eth", "compare"]],
    ),
    field(
        "infiniband.atomicacketh.origremdt",
        Kind::Int,
        &[&["atomic_ack", "orig"]],
    ),
    field("infiniband.immdt", Kind::Bytes, &[&["immdt"]]),
    field("infiniband.ieth", Kind::Bytes, &[&["ieth"]]),
];

fn testdata() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../testdata")
}

/// Every `*.pcap` below `dir`, sorted.
fn pcaps_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            pcaps_under(&path, out);
        } else if path.extension().is_some_and(|x| x == "pcap") {
            out.push(path);
        }
    }
    out.sort();
}

/// `Some(version line)` if tshark runs, `None` if it is not installed.
fn tshark_version() -> Option<String> {
    match Command::new("tshark").arg("-v").output() {
        Ok(o) => {
            assert!(
                o.status.success(),
                "`tshark -v` failed: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            Some(
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .next()
                    .unwrap_or("tshark")
                    .to_string(),
            )
        }
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("cannot run tshark: {e}"),
    }
}

/// `uroce decode --json FILE`: the JSON object of each RoCEv2 packet, by frame number.
fn decode(file: &Path) -> BTreeMap<u64, Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["decode", "--json"])
        .arg(file)
        .output()
        .expect("run the uroce binary");
    assert!(
        o.status.success(),
        "`uroce decode --json {}` failed ({}): {}",
        file.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8(o.stdout).expect("uroce decode prints UTF-8");
    let mut records = BTreeMap::new();
    for line in stdout.lines() {
        let record: Value = serde_json::from_str(line).unwrap_or_else(|e| {
            panic!(
                "{}: `uroce decode --json` printed a non-JSON line ({e}): {line}",
                file.display()
            )
        });
        let frame = record
            .get("frame")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| {
                panic!(
                    "{}: record without an integer \"frame\": {line}",
                    file.display()
                )
            });
        assert!(
            records.insert(frame, record).is_none(),
            "{}: frame {frame} printed twice",
            file.display()
        );
    }
    records
}

/// `tshark -T fields`: the columns of [`FIELDS`] for every frame tshark dissects as InfiniBand
/// (a BTH opcode is shown), by frame number.
fn tshark(file: &Path) -> BTreeMap<u64, Vec<String>> {
    let mut cmd = Command::new("tshark");
    cmd.arg("-n").arg("-r").arg(file);
    cmd.args([
        "-T",
        "fields",
        "-E",
        "separator=/t",
        "-E",
        "occurrence=a",
        "-E",
        "aggregator=,",
    ]);
    cmd.args(["-e", "frame.number"]);
    for f in &FIELDS {
        cmd.args(["-e", f.tshark]);
    }
    let o = cmd.output().expect("run tshark");
    assert!(
        o.status.success(),
        "tshark failed on {}: {}",
        file.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    let mut rows = BTreeMap::new();
    for line in stdout.lines() {
        let mut cols = line.split('\t');
        let frame: u64 = cols
            .next()
            .and_then(|c| c.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}: unexpected tshark line {line:?}", file.display()));
        let mut values: Vec<String> = cols.map(|c| c.trim().to_string()).collect();
        values.resize(FIELDS.len(), String::new());
        if !values[0].is_empty() {
            rows.insert(frame, values);
        }
    }
    rows
}

/// One value as tshark printed it.
fn parse_one(kind: Kind, s: &str) -> Option<u64> {
    match kind {
        Kind::Int => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        },
        Kind::Bool => match s {
            "1" | "True" | "true" => Some(1),
            "0" | "False" | "false" => Some(0),
            _ => None,
        },
        Kind::Bytes => {
            let hex: String = s.chars().filter(|c| *c != ':').collect();
            if hex.is_empty() || hex.len() > 16 {
                None
            } else {
                u64::from_str_radix(&hex, 16).ok()
            }
        }
    }
}

/// A tshark column: `None` if the field is absent. tshark may show one header twice (it does
/// for ImmDt and IETH); every occurrence must then carry the same value.
fn tshark_value(kind: Kind, col: &str) -> Result<Option<u64>, String> {
    if col.is_empty() {
        return Ok(None);
    }
    let mut value = None;
    for s in col.split(',') {
        let v = parse_one(kind, s)
            .ok_or_else(|| format!("tshark printed {col:?}, which does not parse"))?;
        if value.is_some_and(|prev| prev != v) {
            return Err(format!("tshark shows different values {col:?}"));
        }
        value = Some(v);
    }
    Ok(value)
}

/// The decode record's value at the first of `paths` that is present; booleans count as 0/1.
fn decode_value(record: &Value, paths: &[&[&str]]) -> Result<Option<u64>, String> {
    for path in paths {
        let mut v = record;
        let mut present = true;
        for key in *path {
            match v.get(key) {
                Some(inner) if !inner.is_null() => v = inner,
                _ => {
                    present = false;
                    break;
                }
            }
        }
        if present {
            return match v {
                Value::Bool(b) => Ok(Some(u64::from(*b))),
                _ => v
                    .as_u64()
                    .map(Some)
                    .ok_or_else(|| format!("uroce printed {v} at {path:?}, not an integer")),
            };
        }
    }
    Ok(None)
}

fn show(v: Option<u64>) -> String {
    match v {
        Some(v) => format!("{v} (0x{v:x})"),
        None => "absent".to_string(),
    }
}

/// Compares one capture; returns the number of packets compared and appends disagreements.
fn compare_file(
    file: &Path,
    rel: &str,
    problems: &mut Vec<String>,
    bad_icrc_seen: &mut Vec<(String, u64)>,
) -> usize {
    let records = decode(file);
    let rows = tshark(file);
    for frame in records.keys().filter(|f| !rows.contains_key(f)) {
        problems.push(format!(
            "{rel}: frame {frame}: uroce decodes a RoCEv2 packet, tshark shows no BTH"
        ));
    }
    for frame in rows.keys().filter(|f| !records.contains_key(f)) {
        problems.push(format!(
            "{rel}: frame {frame}: tshark shows a BTH, uroce decode prints no packet"
        ));
    }
    let mut compared = 0;
    for (frame, record) in &records {
        let Some(cols) = rows.get(frame) else {
            continue;
        };
        compared += 1;
        for (f, col) in FIELDS.iter().zip(cols) {
            let theirs = tshark_value(f.kind, col);
            let ours = decode_value(record, f.json);
            match (theirs, ours) {
                (Ok(t), Ok(u)) if t == u => {}
                (Ok(t), Ok(u)) => problems.push(format!(
                    "{rel}: frame {frame}: {}: tshark {} vs uroce {}",
                    f.tshark,
                    show(t),
                    show(u)
                )),
                (Err(e), _) | (_, Err(e)) => {
                    problems.push(format!("{rel}: frame {frame}: {}: {e}", f.tshark))
                }
            }
        }
        let want_bad = KNOWN_BAD_ICRC.contains(&(rel, *frame));
        let icrc = record.get("icrc").and_then(Value::as_str);
        let want = if want_bad { "bad" } else { "ok" };
        if icrc != Some(want) {
            problems.push(format!(
                "{rel}: frame {frame}: icrc: expected {want:?}, uroce printed {icrc:?}"
            ));
        }
        if want_bad {
            bad_icrc_seen.push((rel.to_string(), *frame));
        }
    }
    compared
}

#[test]
fn decode_agrees_with_tshark_on_every_capture() {
    let Some(version) = tshark_version() else {
        eprintln!("SKIPPED tshark_agreement: tshark is not installed (apt-get install tshark); nothing compared");
        return;
    };
    let root = testdata();
    let mut files = Vec::new();
    pcaps_under(&root, &mut files);
    assert!(!files.is_empty(), "no *.pcap under {}", root.display());

    let mut problems = Vec::new();
    let mut bad_icrc_seen = Vec::new();
    let mut total = 0;
    for file in &files {
        let rel = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .to_string_lossy()
            .replace('\\', "/");
        let n = compare_file(file, &rel, &mut problems, &mut bad_icrc_seen);
        println!("{rel}: {n} RoCEv2 packets compared");
        total += n;
    }
    println!(
        "{version}: {total} RoCEv2 packets in {} captures compared",
        files.len()
    );

    for (file, frame) in KNOWN_BAD_ICRC {
        if !bad_icrc_seen.iter().any(|(f, n)| f == file && *n == frame) {
            problems.push(format!(
                "{file}: frame {frame}: the known-bad-ICRC packet was not compared"
            ));
        }
    }
    assert!(
        total > 0,
        "no RoCEv2 packet compared in {} captures",
        files.len()
    );
    assert!(
        problems.is_empty(),
        "{} disagreements between `uroce decode --json` and {version}:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn tshark_values_parse() {
    assert_eq!(tshark_value(Kind::Int, "0x000053"), Ok(Some(0x53)));
    assert_eq!(tshark_value(Kind::Int, "12379200"), Ok(Some(12_379_200)));
    assert_eq!(
        tshark_value(Kind::Int, "0x0000000080010000"),
        Ok(Some(0x8001_0000))
    );
    assert_eq!(
        tshark_value(Kind::Int, "17969399269794268996"),
        Ok(Some(17_969_399_269_794_268_996))
    );
    assert_eq!(tshark_value(Kind::Int, ""), Ok(None));
    assert_eq!(tshark_value(Kind::Bool, "1"), Ok(Some(1)));
    assert_eq!(tshark_value(Kind::Bool, "False"), Ok(Some(0)));
    assert_eq!(
        tshark_value(Kind::Bytes, "deadbeef,deadbeef"),
        Ok(Some(0xdead_beef))
    );
    assert_eq!(
        tshark_value(Kind::Bytes, "08:00:03:95"),
        Ok(Some(0x0800_0395))
    );
    assert!(tshark_value(Kind::Bytes, "deadbeef,cafef00d").is_err());
    assert!(tshark_value(Kind::Int, "0xzz").is_err());
    assert!(tshark_value(Kind::Bool, "maybe").is_err());
}

#[test]
fn decode_values_follow_alternative_paths() {
    let atomic: Value =
        serde_json::from_str(r#"{"opcode":20,"se":true,"atomic_eth":{"va":4096,"rkey":7}}"#)
            .expect("valid JSON");
    let reth_va: &[&[&str]] = &[&["reth", "va"], &["atomic_eth", "va"]];
    assert_eq!(decode_value(&atomic, reth_va), Ok(Some(4096)));
    assert_eq!(decode_value(&atomic, &[&["se"]]), Ok(Some(1)));
    assert_eq!(decode_value(&atomic, &[&["reth", "len"]]), Ok(None));
    assert!(decode_value(&serde_json::json!({"psn": "7"}), &[&["psn"]]).is_err());
}
