//! `uroce bench` end to end: every test in `--loopback` and `--pair` with `--verify`,
//! client and server processes on two loopback addresses, the perftest output shape,
//! `--json`, `--plot`, perftest's option refusals and `bench compare --json`.
//!
//! Each test uses its own device addresses (a device address is bound by one process at
//! a time, and tests run in parallel) and its own TCP port. Timings are never asserted.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// perftest's server banner (docs/perftest.md §1).
fn oob_banner() -> &'static str {
    "\n************************************\n* Waiting for client to connect... *\n************************************\n"
}

fn uroce() -> Command {
    Command::new(env!("CARGO_BIN_EXE_uroce"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).to_string()
}

/// Runs `uroce bench ARGS` with `UROCE_DEVICES=devices`.
fn bench(devices: &str, args: &[&str]) -> Output {
    uroce()
        .env("UROCE_DEVICES", devices)
        .arg("bench")
        .args(args)
        .args(["--timeout", "30"])
        .output()
        .expect("run uroce")
}

/// The numbers of the first result line after the table header starting with `header`.
fn result_numbers(out: &str, header: &str) -> Vec<f64> {
    let mut lines = out.lines();
    lines
        .by_ref()
        .find(|l| l.starts_with(header))
        .unwrap_or_else(|| panic!("no `{header}` in:\n{out}"));
    let line = lines
        .next()
        .unwrap_or_else(|| panic!("no result line in:\n{out}"));
    line.split_whitespace()
        .map(|t| {
            t.parse::<f64>()
                .unwrap_or_else(|_| panic!("`{t}` in `{line}`"))
        })
        .collect()
}

const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]";

/// One in-process run with `--verify`; checks the exit status, the verdict and the
/// result line's size and iteration count.
fn in_process(test: &str, topology: &[&str], devices: &str, iters: u64, size: u64) {
    let n = iters.to_string();
    let mut args = vec![test, "-n", &n, "--verify"];
    args.extend_from_slice(topology);
    let out = bench(devices, &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        out.status.success(),
        "{test} {topology:?} failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("--verify: every payload checked matched"),
        "{stderr}"
    );
    assert!(stdout.starts_with(&"-".repeat(87)), "{stdout}");
    let bw = test.ends_with("_bw");
    let nums = result_numbers(&stdout, if bw { BW_HEADER } else { LAT_HEADER });
    assert_eq!(nums.len(), if bw { 5 } else { 9 }, "{stdout}");
    assert_eq!(nums[0], size as f64, "{stdout}");
    assert_eq!(nums[1], iters as f64, "{stdout}");
    if bw {
        // Average bandwidth and message rate of a completed run are positive.
        assert!(nums[3] > 0.0 && nums[4] > 0.0, "{stdout}");
    } else {
        // t_min ≤ t_typical ≤ t_max.
        assert!(nums[2] <= nums[4] && nums[4] <= nums[3], "{stdout}");
    }
}

macro_rules! in_process_tests {
    ($($name:ident: $test:literal, $size:expr, $net:literal;)*) => {
        $(
            mod $name {
                #[test]
                fn loopback() {
                    let dev = concat!("uroce0=127.77.", $net, ".1");
                    super::in_process($test, &["--loopback"], dev, 20, $size);
                }

                #[test]
                fn pair() {
                    let pair = concat!("127.77.", $net, ".2,127.77.", $net, ".3");
                    super::in_process($test, &["--pair", pair], "uroce9=127.77.255.9", 20, $size);
                }
            }
        )*
    };
}

in_process_tests! {
    write_bw: "write_bw", 65536, "10";
    read_bw: "read_bw", 65536, "11";
    send_bw: "send_bw", 65536, "12";
    atomic_bw: "atomic_bw", 8, "13";
    write_lat: "write_lat", 2, "14";
    read_lat: "read_lat", 2, "15";
    send_lat: "send_lat", 2, "16";
    atomic_lat: "atomic_lat", 8, "17";
}

#[test]
fn variants_with_verify() {
    // Multiple QPs, post lists, bidirectional, UD, events and CMP_AND_SWAP.
    for (args, net) in [
        (&["write_bw", "-q", "2", "-l", "4", "-s", "100"][..], "20"),
        (&["send_bw", "-b", "-s", "3000"][..], "21"),
        (&["send_bw", "-c", "UD", "-s", "512"][..], "22"),
        (&["send_lat", "-e"][..], "23"),
        (&["atomic_bw", "-A", "CMP_AND_SWAP", "-b"][..], "24"),
        (&["read_bw", "-o", "4", "-s", "200"][..], "25"),
    ] {
        let dev = format!("uroce0=127.77.{net}.1");
        let mut a = args.to_vec();
        a.extend_from_slice(&["--loopback", "-n", "20", "--verify"]);
        let out = bench(&dev, &a);
        assert!(
            out.status.success(),
            "{args:?}:\n{}\n{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(text(&out.stderr).contains("every payload checked matched"));
    }
}

/// Reads the child's stdout and stderr on threads, reporting once `marker` appears in
/// either; returns the receivers of that signal and of the whole stdout and stderr.
fn watch(
    child: &mut Child,
    marker: &'static str,
) -> (
    mpsc::Receiver<()>,
    mpsc::Receiver<String>,
    mpsc::Receiver<String>,
) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let mut outs = Vec::new();
    let streams: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for stream in streams {
        let (all_tx, all_rx) = mpsc::channel();
        let ready_tx = ready_tx.clone();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stream);
            let mut all = String::new();
            let mut line = String::new();
            while r.read_line(&mut line).unwrap_or(0) > 0 {
                if line.contains(marker) {
                    let _ = ready_tx.send(());
                }
                all.push_str(&line);
                line.clear();
            }
            let _ = all_tx.send(all);
        });
        outs.push(all_rx);
    }
    let err = outs.pop().expect("stderr receiver");
    let out = outs.pop().expect("stdout receiver");
    (ready_rx, out, err)
}

/// A server and a client process on two loopback addresses; returns both outputs.
fn client_server(test: &str, port: &str, net: &str, extra: &[&str]) -> (String, String) {
    let mut server = uroce()
        .env("UROCE_DEVICES", format!("uroce0=127.77.{net}.1"))
        .args(["bench", test, "-p", port, "--timeout", "30"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let (ready, all, all_err) = watch(&mut server, "Waiting for client to connect");
    if ready.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = server.kill();
        panic!(
            "the server did not start listening: {}",
            all_err.recv().unwrap_or_default()
        );
    }
    let client = uroce()
        .env("UROCE_DEVICES", format!("uroce1=127.77.{net}.2"))
        .args([
            "bench",
            test,
            &format!("127.77.{net}.1"),
            "-p",
            port,
            "--timeout",
            "30",
        ])
        .args(extra)
        .output()
        .expect("run the client");
    let status = server.wait().expect("server exit");
    let server_out = all.recv().unwrap_or_default();
    let server_err = all_err.recv().unwrap_or_default();
    let client_out = text(&client.stdout);
    assert!(
        client.status.success(),
        "client:\n{client_out}\n{}",
        text(&client.stderr)
    );
    assert!(status.success(), "server:\n{server_out}\n{server_err}");
    (client_out, server_out)
}

#[test]
fn write_bw_client_server_processes() {
    let (client, server) = client_server("write_bw", "19611", "30", &["-n", "20", "--verify"]);
    assert!(server.starts_with(oob_banner()), "{server}");
    // The client's header shows its TX depth; the passive server's does not.
    assert!(client.contains(" TX depth        : 20\n"), "{client}");
    assert!(!server.contains(" TX depth "), "{server}");
    assert!(
        client.contains(" local address: LID 0000 QPN 0x"),
        "{client}"
    );
    assert!(
        client.contains(" GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:77:30:02"),
        "{client}"
    );
    assert!(
        client.contains(" remote address: LID 0000 QPN 0x"),
        "{client}"
    );
    let c = result_numbers(&client, BW_HEADER);
    let s = result_numbers(&server, BW_HEADER);
    assert_eq!(&c[..2], &[65536.0, 20.0]);
    // perftest's server prints the client's REPORT verbatim.
    assert_eq!(c, s, "client:\n{client}\nserver:\n{server}");
}

#[test]
fn write_lat_client_server_processes() {
    let (client, server) = client_server("write_lat", "19612", "31", &["-n", "20", "--verify"]);
    for out in [&client, &server] {
        let n = result_numbers(out, LAT_HEADER);
        assert_eq!(&n[..2], &[2.0, 20.0], "{out}");
        assert!(out.contains("RDMA_Write Latency Test"), "{out}");
        assert!(out.contains(" Max inline data : 220[B]"), "{out}");
    }
}

#[test]
fn send_bw_client_server_processes_json() {
    let (client, server) = client_server(
        "send_bw",
        "19613",
        "32",
        &["-n", "20", "-s", "4096", "--json"],
    );
    for (out, role) in [(&client, "client"), (&server, "server")] {
        let line = out.lines().next().unwrap_or_default();
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {out}"));
        assert_eq!(v["test"], "ib_send_bw");
        assert_eq!(v["role"], role);
        assert_eq!(v["size_bytes"], 4096);
        assert_eq!(v["iterations"], 20);
        assert!(v["bw_average"].as_f64().is_some_and(|b| b > 0.0), "{v}");
    }
}

#[test]
fn ud_sweep_writes_a_plot() {
    let dir = std::env::temp_dir().join(format!("uroce-bench-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let svg = dir.join("sweep.svg");
    let out = bench(
        "uroce0=127.77.40.1",
        &[
            "send_bw",
            "-c",
            "UD",
            "-a",
            "-n",
            "10",
            "--loopback",
            "--report_gbits",
            "--plot",
            svg.to_str().expect("utf-8 path"),
        ],
    );
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    // UD sweeps 2..MTU (1024): 10 sizes, one line each.
    let sizes: Vec<u64> = stdout
        .lines()
        .skip_while(|l| !l.starts_with(" #bytes"))
        .skip(1)
        .take_while(|l| !l.starts_with("---"))
        .filter_map(|l| l.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(
        sizes,
        vec![2, 4, 8, 16, 32, 64, 128, 256, 512, 1024],
        "{stdout}"
    );
    let svg_text = std::fs::read_to_string(&svg).expect("plot written");
    assert!(svg_text.starts_with("<?xml") && svg_text.contains("<svg"));
    assert_eq!(svg_text.matches("<circle").count(), 10);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `-R` (perftest's rdma_cm mode, docs/perftest.md §8) between two processes: the exchange
/// over an rdma_cm connection, the QPs connected by rdma_cm, every payload verified.
fn rdma_cm_pair(test: &str, port: &str, net: &str, header: &str, extra: &[&str]) {
    let mut args = vec!["-R", "-n", "50", "--verify"];
    args.extend_from_slice(extra);
    let (client, server) = client_server(test, port, net, &args);
    for out in [&client, &server] {
        assert!(out.contains(" rdma_cm QPs\t : ON\n"), "{out}");
        assert!(out.contains(" Data ex. method : rdma_cm\n"), "{out}");
        assert!(
            out.contains(&format!(
                " GID: 00:00:00:00:00:00:00:00:00:00:255:255:127:77:{net}:0"
            )),
            "{out}"
        );
    }
    assert!(
        server.contains(" Waiting for client rdma_cm QP to connect\n"),
        "{server}"
    );
    let c = result_numbers(&client, header);
    assert_eq!(c.get(1), Some(&50.0), "{client}");
}

#[test]
fn write_bw_rdma_cm_processes() {
    rdma_cm_pair("write_bw", "19614", "44", BW_HEADER, &[]);
}

#[test]
fn send_bw_rdma_cm_processes() {
    rdma_cm_pair("send_bw", "19615", "45", BW_HEADER, &[]);
}

#[test]
fn read_lat_rdma_cm_processes() {
    rdma_cm_pair("read_lat", "19616", "46", LAT_HEADER, &[]);
}

#[test]
fn send_lat_rdma_cm_processes() {
    rdma_cm_pair("send_lat", "19617", "47", LAT_HEADER, &[]);
}

/// UD over rdma_cm: SIDR for the test QPs, rdma_cm's Q_Key, and in latency tests the
/// client's QPN message that gives the server its address handle.
#[test]
fn send_bw_ud_rdma_cm_processes() {
    rdma_cm_pair("send_bw", "19618", "48", BW_HEADER, &["-c", "UD"]);
}

#[test]
fn send_lat_ud_rdma_cm_processes() {
    rdma_cm_pair("send_lat", "19619", "49", LAT_HEADER, &["-c", "UD"]);
}

#[test]
fn perftest_refusals_exit_nonzero_with_its_text() {
    for (args, text_wanted) in [
        (
            &["write_bw", "-e", "--loopback"][..],
            "Events feature not available on WRITE verb",
        ),
        (
            &["write_lat", "-b", "--loopback"][..],
            "Bidirectional is only available in BW test",
        ),
        (
            &["read_bw", "-c", "UD", "--loopback"][..],
            "UD connection only possible in SEND verb",
        ),
        (
            &["atomic_bw", "-s", "16", "--loopback"][..],
            "Message size cannot be changed for Atomic",
        ),
        (
            &["write_bw", "-n", "10", "-l", "3", "--loopback"][..],
            "multiple of post list size",
        ),
        (
            &["send_bw", "-R", "-c", "UC", "127.77.41.2"][..],
            "UC is not supported in librdmacm",
        ),
    ] {
        let out = bench("uroce0=127.77.41.1", args);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(
            text(&out.stderr).contains(text_wanted),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

#[test]
fn compare_json_rows() {
    let out = uroce()
        .env("UROCE_DEVICES", "uroce0=127.77.50.1")
        .args([
            "bench",
            "compare",
            "--json",
            "-D",
            "1",
            "-n",
            "50",
            "--pair",
            "127.77.50.1,127.77.50.2",
        ])
        .output()
        .expect("run uroce");
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).expect("JSON");
    let rows = v["rows"].as_array().expect("rows");
    let paths: Vec<&str> = rows.iter().filter_map(|r| r["path"].as_str()).collect();
    assert_eq!(paths, ["tcp", "slow_path", "fast_loopback", "fast_udp"]);
    for r in rows {
        for k in [
            "lat_1b_us",
            "bw_64k_gbps",
            "cpu_us_per_op",
            "ctx_switches_per_s",
            "copies_per_op",
        ] {
            assert!(
                r[k].as_f64().is_some_and(|x| x.is_finite() && x >= 0.0),
                "{k} in {r}"
            );
        }
        assert!(r["lat_1b_us"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r["bw_64k_gbps"].as_f64().is_some_and(|x| x > 0.0), "{r}");
        assert!(r.get("syscalls_per_op").is_some(), "{r}");
    }
    // The devices count their copies: one per payload byte on one device (MR to MR), four
    // between two (into the packet, into and out of the kernel, into the MR; the datagram
    // headers the kernel copies too make it a little more; a retransmission more again).
    let copies = |i: usize| rows[i]["copies_per_op"].as_f64().expect("counted");
    for (i, r) in rows.iter().enumerate().skip(1) {
        assert!(
            r["copies_source"]
                .as_str()
                .is_some_and(|s| s.starts_with("counted")),
            "{r}"
        );
        let c = copies(i);
        match i {
            3 => assert!((4.0..8.0).contains(&c), "{r}"),
            _ => assert!((1.0..1.01).contains(&c), "{r}"),
        }
    }
    if v["machine"]["strace"] == true {
        // A TCP message costs at least its write and its read.
        let tcp = rows[0]["syscalls_per_op"].as_f64().expect("counted");
        assert!(tcp >= 2.0, "{}", rows[0]);
    }
    assert!(v["machine"]["cpus"].as_u64().is_some_and(|c| c >= 1));
}

/// `uroce bench ratios --json`: every baseline measured in the run, the seven figures each
/// with its ratio to its baseline (if it has one) and its goal. The values are this machine's business —
/// nothing is asserted about them beyond being measured and consistent.
#[test]
fn ratios_reports_every_figure_against_its_baseline() {
    let out = bench(
        "uroce0=127.79.30.1",
        &[
            "ratios",
            "--json",
            "-D",
            "1",
            "-n",
            "2000",
            "--pair",
            "127.79.30.2,127.79.30.3",
        ],
    );
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let stdout = text(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("JSON");
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    for k in [
        "memcpy_mb_s",
        "memcpy_64mib_to_64mib_mb_s",
        "udp_one_way_us",
        "tcp_mb_s",
    ] {
        let b = v["baselines"][k].as_f64().unwrap();
        assert!(b.is_finite() && b > 0.0, "{k}: {b}");
    }
    let figs = v["figures"].as_array().unwrap();
    assert_eq!(figs.len(), 7);
    let mut met = 0;
    for f in figs {
        let m = f["measured"].as_f64().unwrap();
        let r = f["ratio"].as_f64().unwrap();
        // (An idle device may well cost no measurable CPU time at all.)
        let idle = f["unit"].as_str() == Some("%");
        assert!(m.is_finite() && (m > 0.0 || (idle && m == 0.0)), "{f}");
        if let Some(b) = f["baseline"].as_f64() {
            assert!((r - m / b).abs() <= 1e-9 * r.abs(), "{f}");
        }
        assert!(f["goal"].as_str().unwrap().starts_with(['<', '>']), "{f}");
        met += usize::from(f["met"].as_bool().unwrap());
    }
    assert_eq!(v["goals_met"].as_u64(), Some(met as u64));
}
