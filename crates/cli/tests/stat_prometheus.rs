//! `uroce stat --prometheus` and `uroce stat --serve`: the exposition of a benchmark
//! running in another process is accepted by a real Prometheus parser (the Python
//! `prometheus_client` package's `text_string_to_metric_families`), and two scrapes of the
//! HTTP endpoint see the counters grow.
//!
//! Skips, saying so, when `python3` with `prometheus_client` is not installed (Debian:
//! `apt-get install python3-prometheus-client`; `.ci/run` installs it). Its own stats
//! directory and device addresses (127.77.91.x); bounded waits; no timing asserted.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Parses the exposition on stdin with prometheus_client and prints every family's name
/// and type and every sample as JSON.
const PARSER: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
fams = []
for f in text_string_to_metric_families(sys.stdin.read()):
    fams.append({"name": f.name, "type": f.type,
                 "samples": [{"name": s.name, "labels": s.labels, "value": s.value} for s in f.samples]})
print(json.dumps(fams))
"#;

/// A Python that has prometheus_client: the one on PATH, or the system's (Debian's package
/// installs into the system Python only).
fn python() -> Option<&'static str> {
    ["python3", "/usr/bin/python3"].into_iter().find(|py| {
        Command::new(py)
            .args(["-c", "import prometheus_client.parser"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The exposition parsed by prometheus_client (panics, with the text, if it refuses it).
fn parse(py: &str, text: &str) -> Vec<Value> {
    let mut c = Command::new(py)
        .args(["-c", PARSER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python3");
    c.stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed the parser");
    let o = c.wait_with_output().expect("parser output");
    assert!(
        o.status.success(),
        "prometheus_client refused the exposition: {}\n{text}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("parser JSON");
    v.as_array().cloned().unwrap_or_default()
}

/// The value of sample `name` with labels `want` (all of them), if present.
fn sample(fams: &[Value], name: &str, want: &[(&str, &str)]) -> Option<f64> {
    fams.iter()
        .flat_map(|f| f["samples"].as_array().cloned().unwrap_or_default())
        .find(|s| {
            s["name"] == name
                && want
                    .iter()
                    .all(|(k, v)| s["labels"][*k].as_str() == Some(*v))
        })
        .and_then(|s| s["value"].as_f64())
}

fn family_type<'a>(fams: &'a [Value], name: &str) -> Option<&'a str> {
    fams.iter()
        .find(|f| f["name"] == name)
        .and_then(|f| f["type"].as_str())
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn uroce(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uroce"));
    c.env("UROCE_STATS_DIR", dir).env_remove("UROCE_STATS");
    c
}

fn stats_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-stat-prom-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create stats dir");
    d
}

/// `GET /metrics` from the endpoint at `addr`: (status line, content type, body).
fn scrape(addr: &str) -> (String, String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the endpoint");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut all = String::new();
    s.read_to_string(&mut all).expect("read the answer");
    let (head, body) = all.split_once("\r\n\r\n").expect("HTTP head");
    let status = head.lines().next().unwrap_or("").to_string();
    let ctype = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or("")
        .to_string();
    (status, ctype, body.to_string())
}

#[test]
fn exposition_parses_and_scrapes_grow() {
    let Some(py) = python() else {
        eprintln!(
            "SKIPPED: python3 with prometheus_client is not installed \
             (apt-get install python3-prometheus-client); the exposition was not parsed"
        );
        return;
    };
    let dir = stats_dir("serve");
    let bench = uroce(&dir)
        .args([
            "bench",
            "write_bw",
            "--pair",
            "127.77.91.1,127.77.91.2",
            "-D",
            "120",
            "--timeout",
            "150",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the benchmark");
    let bench = Killed(bench);
    let pid = bench.0.id().to_string();
    let me = [("device", "uroce0"), ("port", "1"), ("pid", pid.as_str())];

    // `--prometheus` once the benchmark is moving packets.
    let deadline = Instant::now() + Duration::from_secs(60);
    let fams = loop {
        let o = uroce(&dir)
            .args(["stat", "--prometheus"])
            .output()
            .expect("uroce stat --prometheus");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let fams = parse(py, &String::from_utf8_lossy(&o.stdout));
        if sample(&fams, "uroce_sent_pkts_total", &me).is_some_and(|v| v > 0.0) {
            break fams;
        }
        assert!(Instant::now() < deadline, "no traffic seen: {fams:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(family_type(&fams, "uroce_sent_pkts"), Some("counter"));
    assert_eq!(family_type(&fams, "uroce_qp_sent_pkts"), Some("counter"));
    assert_eq!(family_type(&fams, "uroce_objects"), Some("gauge"));
    assert_eq!(family_type(&fams, "uroce_cq_lost_cqes"), Some("counter"));
    assert_eq!(sample(&fams, "uroce_cq_lost_cqes_total", &me), Some(0.0));
    for n in [
        "uroce_rcvd_icrc_err_total",
        "uroce_cq_overflow_total",
        "uroce_rcvd_rnr_err_total",
        "uroce_send_rnr_err_total",
        "uroce_retry_exceeded_err_total",
        "uroce_rcvd_seq_err_total",
        "uroce_port_xmit_packets_total",
    ] {
        assert!(sample(&fams, n, &me).is_some(), "no {n}");
    }
    let process = fams
        .iter()
        .flat_map(|f| f["samples"].as_array().cloned().unwrap_or_default())
        .find(|s| s["labels"]["pid"] == pid.as_str())
        .map(|s| s["labels"]["process"].clone());
    assert_eq!(process, Some(Value::from("uroce")));
    assert!(
        sample(&fams, "uroce_objects", &[("pid", &pid), ("kind", "qps")]).is_some_and(|v| v >= 1.0)
    );
    let qp_sent = fams
        .iter()
        .find(|f| f["name"] == "uroce_qp_sent_pkts")
        .and_then(|f| f["samples"].as_array().cloned())
        .unwrap_or_default();
    assert!(
        qp_sent
            .iter()
            .any(|s| s["labels"]["pid"] == pid.as_str() && s["labels"]["qp"].is_string()),
        "{qp_sent:?}"
    );

    // The endpoint: on an ephemeral loopback port, scraped twice.
    let mut server = uroce(&dir)
        .args(["stat", "--serve", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start uroce stat --serve");
    let mut err = BufReader::new(server.stderr.take().expect("stderr"));
    let server = Killed(server);
    let mut line = String::new();
    err.read_line(&mut line).expect("serving line");
    let addr = line
        .trim()
        .strip_prefix("uroce stat: serving http://")
        .and_then(|s| s.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_string();
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let (status, ctype, body) = scrape(&addr);
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    let first = sample(&parse(py, &body), "uroce_sent_pkts_total", &me).expect("first scrape");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let (_, _, body) = scrape(&addr);
        let now = sample(&parse(py, &body), "uroce_sent_pkts_total", &me).expect("later scrape");
        if now > first {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "counter did not grow: {first} -> {now}"
        );
    }
    drop(server);
    drop(bench);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn serve_refuses_a_bad_address() {
    let dir = stats_dir("bad");
    let o = uroce(&dir)
        .args(["stat", "--serve", "nonsense"])
        .output()
        .expect("run");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("--serve wants [ADDR:]PORT"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
