//! `uroce sim` end to end: the JSON report, exit status, the partition outcome, and a clean
//! link's zero retransmissions.

use std::process::Command;

use serde_json::Value;

fn sim(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .arg("sim")
        .args(args)
        .arg("--json")
        .output()
        .expect("run uroce");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let v: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    (
        out.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

#[test]
fn lossy_run_reports_every_key_and_passes() {
    let (code, v, err) = sim(&[
        "--transport",
        "--seed",
        "42",
        "--messages",
        "600",
        "--loss",
        "0.1",
        "--dup",
        "0.05",
        "--reorder",
        "0.1",
        "--corrupt",
        "0.01",
        "--ops",
        "send,write,read,atomic",
        "--size",
        "1..3000",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    for key in [
        "messages_completed",
        "bytes_verified",
        "retransmissions",
        "naks",
        "duplicates_received",
        "status_counts",
        "violations",
        "virtual_time_ms",
        "seed",
    ] {
        assert!(v.get(key).is_some(), "missing {key}: {v}");
    }
    assert_eq!(v["seed"], 42);
    assert_eq!(v["violations"], 0);
    assert_eq!(v["messages_completed"], 600);
    assert!(v["bytes_verified"].as_u64().unwrap() > 0);
    assert!(v["retransmissions"].as_u64().unwrap() > 0);
    assert!(v["naks"]["seq"].as_u64().unwrap() > 0);
    assert!(v["status_counts"]["success"].as_u64().unwrap() >= 600);
    assert!(v["virtual_time_ms"].as_f64().unwrap() > 0.0);
}

#[test]
fn partition_ends_in_retry_exceeded_and_flush() {
    let (code, v, err) = sim(&[
        "--transport",
        "--seed",
        "7",
        "--messages",
        "20000",
        "--partition-at",
        "1",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["violations"], 0);
    let sc = &v["status_counts"];
    assert_eq!(sc["transport retry counter exceeded"], 2, "{sc}");
    assert!(
        sc["Work Request Flushed Error"].as_u64().unwrap() > 0,
        "{sc}"
    );
    assert_eq!(v["final_qp_states"], serde_json::json!(["ERR", "ERR"]));
}

#[test]
fn clean_link_has_no_retransmissions() {
    let (code, v, _) = sim(&["--transport", "--seed", "3", "--messages", "500"]);
    assert_eq!(code, 0);
    assert_eq!(v["retransmissions"], 0);
    assert_eq!(v["duplicates_received"], 0);
    assert_eq!(v["naks"]["seq"], 0);
    assert_eq!(
        v["status_counts"].as_object().map(|o| o.len()),
        Some(1),
        "only success"
    );
}

#[test]
fn human_output_ends_with_a_verdict_and_bad_flags_are_refused() {
    for mode in ["--transport", "--device"] {
        let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
            .args(["sim", mode, "--seed", "1", "--messages", "50"])
            .output()
            .unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        let last = text.lines().last().unwrap_or("");
        assert!(last.starts_with("verdict: PASS"), "{text}");
    }
    // The default is the device datapaths.
    let (code, v, err) = sim(&["--seed", "2", "--messages", "100"]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["device"], true);
    assert_eq!(v["messages_completed"], 100);
    for bad in [
        ["--loss", "1.5"],
        ["--mtu", "1000"],
        ["--ops", "send,flush"],
        ["--size", "9..3"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
            .arg("sim")
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?} must be refused");
    }
}

#[test]
fn device_runs_pass_over_a_hostile_wire_and_a_cut_one() {
    // `--device`: the same kind of workload on two real device datapaths.
    let (code, v, err) = sim(&[
        "--device",
        "--seed",
        "42",
        "--messages",
        "600",
        "--loss",
        "0.1",
        "--dup",
        "0.05",
        "--reorder",
        "0.1",
        "--corrupt",
        "0.01",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["device"], true);
    assert_eq!(v["violations"], 0);
    assert_eq!(v["messages_completed"], 600);
    assert!(v["retransmissions"].as_u64().unwrap() > 0);
    assert!(v["network"]["dropped"].as_u64().unwrap() > 0);
    let (code, v, err) = sim(&[
        "--device",
        "--seed",
        "7",
        "--messages",
        "20000",
        "--partition-at",
        "1",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    // Traffic goes both ways: each direction ends in its own retry exhaustion.
    let sc = &v["status_counts"];
    assert_eq!(sc["transport retry counter exceeded"], 2, "{sc}");
    assert!(
        sc["Work Request Flushed Error"].as_u64().unwrap() > 0,
        "{sc}"
    );
    // Options of the transport-only simulator are refused, not ignored.
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .args(["sim", "--device", "--rate-gbps", "40"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn device_runs_take_the_mtu_selective_repeat_and_late_receives() {
    // MTU 4096 with selective repeat over a lossy wire, and B short of receives (4 posted,
    // each re-posted 200 virtual µs after use): RNR NAKs, retried until served.
    let (code, v, err) = sim(&[
        "--device",
        "--seed",
        "5",
        "--messages",
        "200",
        "--ops",
        "send,write",
        "--size",
        "1..9000",
        "--mtu",
        "4096",
        "--selective-repeat",
        "--loss",
        "0.05",
        "--recv-depth",
        "4",
        "--recv-delay-us",
        "200",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["violations"], 0);
    assert_eq!(v["messages_completed"], 200);
    assert!(v["rnr_naks"].as_u64().unwrap() > 0, "{v}");
    assert!(v["retransmissions"].as_u64().unwrap() > 0, "{v}");
    // With finite RNR retries and receives that come too late, the run ends in "RNR retry
    // counter exceeded" and flushes, and says so without a violation (one way, so that
    // exactly one QP runs out).
    let (code, v, err) = sim(&[
        "--device",
        "--seed",
        "6",
        "--messages",
        "200",
        "--ops",
        "send",
        "--recv-depth",
        "1",
        "--recv-delay-us",
        "100000",
        "--rnr-retry",
        "0",
        "--one-way",
    ]);
    assert_eq!(code, 0, "{v}\n{err}");
    assert_eq!(v["violations"], 0);
    let sc = &v["status_counts"];
    assert_eq!(sc["RNR retry counter exceeded"], 1, "{sc}");
    assert!(
        sc["Work Request Flushed Error"].as_u64().unwrap() > 0,
        "{sc}"
    );
}
