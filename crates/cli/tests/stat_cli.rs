//! `uroce stat` end to end: the counters of a benchmark running in another process, read
//! while it runs (they move), `-d` and `--qp` filters, `--watch` deltas, the socket a
//! process leaves when killed (removed by the next `uroce stat`) and the one it removes
//! itself at a normal exit, and the snapshot it leaves at exit with `UROCE_STATS_KEEP=1`.
//!
//! Every test uses its own stats directory (`UROCE_STATS_DIR`), so processes of other
//! tests on the machine are never seen, and its own device addresses (127.77.90.x).
//! Waits are bounded; no timing is asserted.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn uroce(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_uroce"));
    c.env("UROCE_STATS_DIR", dir).env_remove("UROCE_STATS");
    c
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// A fresh, empty directory for one test's sockets.
fn stats_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-stat-cli-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create stats dir");
    d
}

fn stat(dir: &Path, args: &[&str]) -> Output {
    uroce(dir)
        .arg("stat")
        .args(args)
        .output()
        .expect("run uroce stat")
}

fn stat_json(dir: &Path, args: &[&str]) -> (Value, String) {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let o = stat(dir, &all);
    let out = text(&o.stdout);
    let v: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|e| panic!("{e}: {out}\nstderr: {}", text(&o.stderr)));
    (v, out)
}

/// The published process `pid` in a `--json` report.
fn process(v: &Value, pid: u32) -> Option<&Value> {
    v["processes"]
        .as_array()?
        .iter()
        .find(|p| p["pid"].as_u64() == Some(u64::from(pid)))
}

fn device<'a>(p: &'a Value, name: &str) -> Option<&'a Value> {
    p["devices"]
        .as_array()?
        .iter()
        .find(|d| d["name"].as_str() == Some(name))
}

fn counter(d: &Value, name: &str) -> u64 {
    d["counters"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no counter {name} in {d}"))
}

/// A child process killed (SIGKILL) when dropped, so a failing test leaves no benchmark
/// spinning.
struct Workload(Child);

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `uroce stat --json` until `ok` holds for process `pid`, at most `limit`.
fn wait_for(dir: &Path, pid: u32, limit: Duration, ok: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + limit;
    loop {
        let (v, _) = stat_json(dir, &[]);
        if process(&v, pid).is_some_and(&ok) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up waiting; last report {v}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn counters_move_while_a_benchmark_runs_in_another_process() {
    let dir = stats_dir("bench");
    let child = uroce(&dir)
        .args([
            "bench",
            "write_bw",
            "--pair",
            "127.77.90.1,127.77.90.2",
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
    let mut work = Workload(child);
    let pid = work.0.id();

    // Both devices of the benchmark appear, with traffic.
    let first = wait_for(&dir, pid, Duration::from_secs(60), |p| {
        ["uroce0", "uroce1"].iter().all(|n| {
            device(p, n).is_some_and(|d| counter(d, "sent_pkts") > 0 && counter(d, "rcvd_pkts") > 0)
        })
    });
    let p = process(&first, pid).expect("listed");
    assert_eq!(p["program"], "uroce");
    assert!(p["cmdline"].to_string().contains("write_bw"), "{p}");
    let d0 = device(p, "uroce0").expect("uroce0");
    assert_eq!(d0["addr"], "127.77.90.1");
    assert_eq!(d0["port"], 1);
    let (sent0, rcvd0) = (counter(d0, "sent_pkts"), counter(d0, "rcvd_pkts"));
    // The QP doing the WRITEs is listed with its own counters.
    let qps = d0["qps"].as_array().expect("qps");
    assert_eq!(qps.len(), 1, "{d0}");
    let qpn = qps[0]["qpn"].as_u64().expect("qpn");
    assert!(qps[0]["counters"]["rdma_sends"].as_u64() > Some(0), "{d0}");

    // They keep moving: a later snapshot has more packets both ways.
    let later = wait_for(&dir, pid, Duration::from_secs(60), |p| {
        device(p, "uroce0")
            .is_some_and(|d| counter(d, "sent_pkts") > sent0 && counter(d, "rcvd_pkts") > rcvd0)
    });
    assert!(process(&later, pid).is_some());

    // The JSON keeps rxe's counter order: sent_pkts, rcvd_pkts, ..., then the engine's.
    let (_, raw) = stat_json(&dir, &[]);
    let at = |k: &str| raw.find(&format!("\"{k}\":")).expect(k);
    assert!(at("sent_pkts") < at("rcvd_pkts") && at("rcvd_pkts") < at("port_xmit_packets"));

    // Text: a pid line and one `link` line per device, rdma-stat style.
    let o = stat(&dir, &[]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(out.contains(&format!("pid {pid} uroce: ")), "{out}");
    for (n, a) in [("uroce0", "127.77.90.1"), ("uroce1", "127.77.90.2")] {
        let line = out
            .lines()
            .find(|l| l.starts_with(&format!("link {n}/1 addr {a} sent_pkts ")))
            .unwrap_or_else(|| panic!("no {n} line in {out}"));
        assert!(line.contains(" rcvd_pkts ") && line.contains(" port_xmit_packets "));
    }

    // -d: only that device.
    let (v, _) = stat_json(&dir, &["-d", "uroce1"]);
    let p = process(&v, pid).expect("listed with -d");
    let names: Vec<&str> = p["devices"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|d| d["name"].as_str())
        .collect();
    assert_eq!(names, ["uroce1"]);
    let out = text(&stat(&dir, &["-d", "uroce1"]).stdout);
    assert!(
        out.contains("link uroce1/1 ") && !out.contains("link uroce0/1 "),
        "{out}"
    );
    let o = stat(&dir, &["-d", "uroce9"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stdout).contains("no device uroce9"),
        "{}",
        text(&o.stdout)
    );

    // --qp: that QP only, in decimal or hex (QPNs are per device: each device of the
    // benchmark may have one with this number, so name the device too).
    let (v, _) = stat_json(&dir, &["-d", "uroce0", "--qp", &qpn.to_string()]);
    let p = process(&v, pid).expect("listed with --qp");
    let devs = p["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 1, "{p}");
    assert_eq!(devs[0]["name"], "uroce0");
    let qps = devs[0]["qps"].as_array().unwrap();
    assert_eq!(qps.len(), 1);
    assert_eq!(qps[0]["qpn"].as_u64(), Some(qpn));
    let o = stat(&dir, &["-d", "uroce0", "--qp", &format!("{qpn:#x}")]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert!(
        out.starts_with(&format!(
            "link uroce0/1 lqpn {qpn} pid {pid} comm uroce sent_pkts "
        )),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
    let o = stat(&dir, &["--qp", "0xfffffe"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stdout).contains("no QP 16777214"));

    // --watch: a full report, then only what changed, marked with the interval.
    let o = stat(&dir, &["-d", "uroce0", "--watch", "0.3", "--count", "2"]);
    assert!(o.status.success());
    let out = text(&o.stdout);
    assert_eq!(out.matches("\n--- +").count(), 1, "{out}");
    let delta = out
        .lines()
        .rfind(|l| l.starts_with("link uroce0/1 "))
        .expect("delta line");
    assert!(
        delta.contains(" over ") && delta.contains(" sent_pkts ") && delta.contains("/s)"),
        "{out}"
    );

    // Killed: the socket stays behind, the next `uroce stat` removes it and says no process
    // is running.
    let sock = dir.join(format!("{pid}.sock"));
    assert!(sock.exists());
    work.0.kill().expect("kill");
    work.0.wait().expect("wait");
    assert!(sock.exists(), "SIGKILL skips the exit handler");
    let (v, _) = stat_json(&dir, &[]);
    assert_eq!(v["processes"].as_array().map(Vec::len), Some(0), "{v}");
    assert_eq!(v["removed_stale"][0], sock.display().to_string());
    assert!(!sock.exists());
    let o = stat(&dir, &[]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("no running uroce process"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_normal_exit_removes_the_socket() {
    let dir = stats_dir("exit");
    std::fs::remove_dir(&dir).expect("start without the directory");
    // devinfo opens the device, so it publishes its counters while it runs.
    let o = uroce(&dir)
        .env("UROCE_DEVICES", "uroce0=127.77.90.5")
        .arg("devinfo")
        .output()
        .expect("run devinfo");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let md = std::fs::metadata(&dir).expect("the publisher created the directory");
    assert_eq!(md.permissions().mode() & 0o777, 0o700);
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    // UROCE_STATS=0 turns publishing off: not even the directory is made.
    std::fs::remove_dir(&dir).unwrap();
    let o = uroce(&dir)
        .env("UROCE_STATS", "0")
        .env("UROCE_DEVICES", "uroce0=127.77.90.6")
        .arg("devinfo")
        .output()
        .expect("run devinfo");
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(!dir.exists());
}

#[test]
fn an_exited_process_leaves_its_last_counters_when_asked() {
    let dir = stats_dir("keep");
    // A short run between two devices, with UROCE_STATS_KEEP=1: its snapshot at exit
    // stays behind, with every packet it sent and received.
    let o = uroce(&dir)
        .env("UROCE_STATS_KEEP", "1")
        .args(["bench", "write_bw", "--pair", "127.77.90.9,127.77.90.10"])
        .args(["-s", "4096", "-n", "200"])
        .output()
        .expect("run the benchmark");
    assert!(o.status.success(), "{}", text(&o.stderr));
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].ends_with(".exit.json"), "{names:?}");
    let pid: u32 = names[0].trim_end_matches(".exit.json").parse().unwrap();

    // Without --exited, nothing runs; with it, the process is there, marked exited.
    let (v, _) = stat_json(&dir, &[]);
    assert!(process(&v, pid).is_none(), "{v}");
    let (v, _) = stat_json(&dir, &["--exited"]);
    let p = process(&v, pid).unwrap_or_else(|| panic!("not listed: {v}"));
    assert_eq!(p["exited"], true);
    let d0 = device(p, "uroce0").expect("uroce0");
    let d1 = device(p, "uroce1").expect("uroce1");
    // 200 WRITEs of 4 KiB at the default MTU of 1024: at least 800 packets each way of
    // data, and the responder's ACKs back.
    assert!(counter(d0, "sent_pkts") >= 800, "{d0}");
    assert!(counter(d1, "rcvd_pkts") >= 800, "{d1}");
    assert_eq!(counter(d0, "sent_pkts"), counter(d1, "rcvd_pkts"), "{p}");
    assert_eq!(counter(d1, "sent_pkts"), counter(d0, "rcvd_pkts"), "{p}");
    let o = stat(&dir, &["--exited"]);
    assert!(
        text(&o.stdout).contains(&format!("pid {pid} uroce (exited)")),
        "{}",
        text(&o.stdout)
    );

    // A file that is not a snapshot is reported, not fatal.
    std::fs::write(dir.join("4242.exit.json"), b"{ not json").unwrap();
    let o = stat(&dir, &["--exited"]);
    assert!(o.status.success());
    assert!(text(&o.stderr).contains("4242"), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains(&format!("pid {pid} ")));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stale_sockets_are_removed_and_no_process_is_reported() {
    let dir = stats_dir("stale");
    // A socket of a process that is gone.
    let mut gone = Command::new("true").spawn().expect("spawn true");
    let dead = gone.id();
    gone.wait().unwrap();
    let dead_sock = dir.join(format!("{dead}.sock"));
    drop(UnixListener::bind(&dead_sock).unwrap());
    // A socket under a live pid (this test's) that nobody listens on: ECONNREFUSED.
    let refused = dir.join(format!("{}.sock", std::process::id()));
    drop(UnixListener::bind(&refused).unwrap());
    // A dead process's half-published temporary.
    let tmp = dir.join(format!("{dead}.sock.tmp"));
    drop(UnixListener::bind(&tmp).unwrap());
    // Not ours to touch.
    let other = dir.join("README");
    std::fs::write(&other, b"x").unwrap();

    let o = stat(&dir, &[]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(
        out.starts_with("no running uroce process publishes counters (looked in "),
        "{out}"
    );
    assert!(!dead_sock.exists() && !refused.exists() && !tmp.exists());
    assert!(other.exists());

    let (v, _) = stat_json(&dir, &[]);
    assert_eq!(v["processes"], serde_json::json!([]));
    assert_eq!(v["dirs"][0], dir.display().to_string());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_arguments_are_refused() {
    let dir = stats_dir("args");
    for args in [
        &["--watch", "0"][..],
        &["--watch", "-1"],
        &["--watch", "nan"],
        &["--qp", "x"],
        &["--count", "2"],
        &["--watch", "1", "--count", "0"],
    ] {
        let o = stat(&dir, args);
        assert!(!o.status.success(), "{args:?} accepted");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
