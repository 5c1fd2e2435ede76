//! `uroce capture` and `uroce trace` end to end (docs/operations.md).
//!
//! Capture: `uroce bench write_bw` on one device (every packet same-device loopback: no
//! socket, headers synthesized), on two devices of one process (`--pair`, over UDP), and as
//! a server and a client process appending to one file. Each pcap must decode in
//! `uroce decode --json` with every ICRC correct (tshark 4.0 shows the ICRC without checking
//! it), and in tshark as RoCEv2 ("RRoCE": UDP 4791) in every frame, with no malformed
//! packet or warning; the packet counts and directions must be those of the run.
//!
//! Trace: stock `ibv_rc_pingpong` (server and client processes) on the drop-in
//! `libibverbs.so.1` under `uroce trace`: the create and modify commands with their
//! results, the server's RTR naming the client's QPN; and `tests/compat/modify_reset_rts.c`
//! (an illegal RESET -> RTS) whose failing MODIFY_QP is printed with EINVAL and the reason.
//!
//! Without tshark, the drop-in library (scripts/build-compat.sh), ibverbs-utils or
//! libibverbs-dev's headers, the parts that need them print `SKIPPED: why` and pass;
//! .ci/run installs the packages and scripts/test-all.sh builds the library first.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn uroce() -> &'static str {
    env!("CARGO_BIN_EXE_uroce")
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("uroce-capture-trace-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn have_tshark() -> bool {
    match Command::new("tshark").arg("-v").output() {
        Ok(o) => o.status.success(),
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => panic!("cannot run tshark: {e}"),
    }
}

/// `uroce decode --json`: every record, after checking the summary and that nothing is
/// garbled.
fn decode(file: &Path) -> Vec<Value> {
    let out = Command::new(uroce())
        .args(["decode", "--json"])
        .arg(file)
        .output()
        .unwrap();
    ok(&out, "uroce decode");
    let summary = String::from_utf8_lossy(&out.stderr);
    assert!(
        summary.contains(" 0 garbled, 0 bad ICRC"),
        "{}: {summary}",
        file.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Checks a capture: it decodes with every ICRC correct, every frame is RoCEv2, tshark
/// (when installed) dissects every frame as InfiniBand over UDP 4791 with no malformed
/// packet and no warning (UDP checksums checked too). Returns the (src, dst) of each packet.
fn check_capture(file: &Path) -> Vec<(String, String)> {
    let records = decode(file);
    assert!(!records.is_empty(), "{}: no packets", file.display());
    let mut flows = Vec::new();
    for r in &records {
        assert_eq!(r["icrc"], "ok", "{}: {r}", file.display());
        let s = |k: &str| {
            r[k].as_str()
                .unwrap_or_else(|| panic!("no {k} in {r}"))
                .to_string()
        };
        flows.push((s("src"), s("dst")));
    }
    if !have_tshark() {
        println!("SKIPPED tshark part: tshark is not installed (apt-get install tshark)");
        return flows;
    }
    let t = |filter: &str| -> Vec<String> {
        let out = Command::new("tshark")
            .args(["-n", "-o", "udp.check_checksum:TRUE", "-r"])
            .arg(file)
            .args(["-Y", filter, "-T", "fields", "-e", "frame.number"])
            .output()
            .unwrap();
        ok(&out, "tshark");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    let bad = t("_ws.malformed || _ws.expert.severity >= warning");
    assert!(
        bad.is_empty(),
        "{}: tshark flags frames {bad:?}",
        file.display()
    );
    let all = t("frame");
    let ib = t("udp.dstport == 4791 && infiniband.bth.opcode");
    assert_eq!(all.len(), records.len(), "{}: frames", file.display());
    assert_eq!(
        ib.len(),
        records.len(),
        "{}: tshark dissects only frames {ib:?} as RoCEv2",
        file.display()
    );
    flows
}

fn count(flows: &[(String, String)], src: &str, dst: &str) -> usize {
    flows.iter().filter(|(s, d)| s == src && d == dst).count()
}

#[test]
fn capture_of_a_loopback_bench_is_a_wire_capture() {
    let dir = scratch("loopback");
    let pcap = dir.join("lb.pcap");
    let out = Command::new(uroce())
        .arg("capture")
        .arg("-o")
        .arg(&pcap)
        .args(["--", uroce(), "bench", "write_bw", "--loopback"])
        .args(["-n", "20", "-s", "8192", "--timeout", "120"])
        .env("UROCE_DEVICES", "uroce0=127.79.1.1")
        .output()
        .unwrap();
    ok(&out, "uroce capture -- uroce bench write_bw --loopback");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("uroce capture: "),
        "no summary: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flows = check_capture(&pcap);
    // 20 WRITEs of 8 KiB at the loopback MTU, ACKed: one device, both ends on it.
    assert!(flows.len() >= 20 * 2, "{} packets", flows.len());
    assert_eq!(count(&flows, "127.79.1.1", "127.79.1.1"), flows.len());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn capture_of_two_devices_in_one_process_records_each_packet_once() {
    let dir = scratch("pair");
    let pcap = dir.join("pair.pcap");
    let out = Command::new(uroce())
        .arg("capture")
        .arg("-o")
        .arg(&pcap)
        .args(["--", uroce(), "bench", "write_bw"])
        .args(["--pair", "127.79.2.1,127.79.2.2", "-n", "20", "-s", "8192"])
        .args(["--timeout", "120"])
        .output()
        .unwrap();
    ok(&out, "uroce capture -- uroce bench write_bw --pair");
    let flows = check_capture(&pcap);
    let (ab, ba) = (
        count(&flows, "127.79.2.1", "127.79.2.2"),
        count(&flows, "127.79.2.2", "127.79.2.1"),
    );
    assert!(ab >= 20 && ba >= 1, "127.79.2.1 -> .2: {ab}, back: {ba}");
    assert_eq!(ab + ba, flows.len());
    // Sent and received by this process's devices, yet recorded once: every PSN of the
    // WRITE stream appears once.
    let mut psns: Vec<u64> = decode(&pcap)
        .iter()
        .filter(|r| r["src"] == "127.79.2.1")
        .map(|r| r["psn"].as_u64().unwrap())
        .collect();
    let n = psns.len();
    psns.sort_unstable();
    psns.dedup();
    assert_eq!(psns.len(), n, "a packet was recorded twice");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn capture_snaplen_cuts_frames_and_keeps_their_length() {
    let dir = scratch("snaplen");
    let pcap = dir.join("cut.pcap");
    let out = Command::new(uroce())
        .arg("capture")
        .arg("-o")
        .arg(&pcap)
        .args([
            "--snaplen",
            "96",
            "--",
            uroce(),
            "bench",
            "write_bw",
            "--loopback",
        ])
        .args(["-n", "5", "-s", "4096", "--timeout", "120"])
        .env("UROCE_DEVICES", "uroce0=127.79.7.1")
        .output()
        .unwrap();
    ok(&out, "uroce capture --snaplen 96");
    let mut r = capture::PcapReader::new(std::fs::File::open(&pcap).unwrap()).unwrap();
    assert_eq!(r.header().snaplen, 96);
    let (mut n, mut cut) = (0, 0);
    while let Some(rec) = r.next_record().unwrap() {
        n += 1;
        assert!(rec.data.len() <= 96, "record of {} bytes", rec.data.len());
        if rec.is_cut_short() {
            cut += 1;
            // Ethernet + IPv4 + UDP + BTH + RETH/payload + ICRC: a 1024-byte MTU segment.
            assert!(rec.orig_len > 1024, "orig_len {}", rec.orig_len);
        }
    }
    assert!(n > 0 && cut > 0, "{n} records, {cut} cut");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_writer_that_cannot_keep_up_costs_records_not_progress() {
    // A FIFO nobody reads: the writer thread blocks once the pipe buffer is full, the queue
    // fills, and the engine must go on, dropping and counting records.
    let dir = scratch("stuck");
    let fifo = dir.join("stuck.pcap");
    let mk = Command::new("mkfifo").arg(&fifo).output().unwrap();
    ok(&mk, "mkfifo");
    let out = Command::new(uroce())
        .args([
            "bench",
            "write_bw",
            "--loopback",
            "-n",
            "300",
            "-s",
            "65536",
        ])
        .args(["--timeout", "120"])
        .env("UROCE_DEVICES", "uroce0=127.79.8.1")
        .env("UROCE_CAPTURE", &fifo)
        .output()
        .unwrap();
    ok(&out, "uroce bench with a stuck capture writer");
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("packets not recorded"))
        .unwrap_or_else(|| panic!("no loss report on stderr: {err}"));
    // 300 WRITEs of 64 KiB at a 1024-byte MTU: 19200 packets and their ACKs, none written
    // (the writer's first write never returns), most dropped at the full queue (8192
    // records, and at most 1 MiB of them taken into the writer's batch).
    let number_before = |marker: &str| -> u64 {
        line.split(marker)
            .next()
            .and_then(|h| h.split([' ', '(']).rfind(|w| !w.is_empty()))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number before {marker:?} in {line}"))
    };
    let lost = number_before(" packets not recorded");
    let dropped = number_before(" with the queue full");
    assert!(lost >= 19200, "{line}");
    assert!(dropped >= 19200 - 8192 - 1024 && dropped <= lost, "{line}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether something listens on TCP `port` (from /proc/net/tcp: a probe connection would
/// be taken for the client).
fn listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let cols: Vec<&str> = l.split_whitespace().collect();
                cols.get(1).is_some_and(|a| format!("{a} ").contains(&want))
                    && cols.get(3) == Some(&"0A")
            })
        })
    })
}

/// Waits (≤ 60 s) for `port` to listen, or fails with the server's output.
fn wait_listen(port: u16, server: &mut Child) {
    let t0 = Instant::now();
    while !listening(port) {
        if let Some(st) = server.try_wait().unwrap() {
            panic!("server exited ({st}) before listening on {port}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "server not listening on {port}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn capture_of_a_server_and_a_client_process_in_one_file() {
    let dir = scratch("procs");
    let pcap = dir.join("two.pcap");
    let port = 18761;
    // Both processes append to one file (created empty by the first `uroce capture`).
    std::fs::File::create(&pcap).unwrap();
    let mut server = Command::new(uroce())
        .args([
            "bench",
            "write_bw",
            "-n",
            "20",
            "-s",
            "8192",
            "--timeout",
            "120",
        ])
        .args(["-p", &port.to_string()])
        .env("UROCE_DEVICES", "uroce0=127.79.3.1")
        .env("UROCE_CAPTURE", &pcap)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_listen(port, &mut server);
    let client = Command::new(uroce())
        .args([
            "bench",
            "write_bw",
            "-n",
            "20",
            "-s",
            "8192",
            "--timeout",
            "120",
        ])
        .args(["-p", &port.to_string(), "127.0.0.1"])
        .env("UROCE_DEVICES", "uroce1=127.79.3.2")
        .env("UROCE_CAPTURE", &pcap)
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    ok(&client, "bench client");
    ok(&server, "bench server");
    let flows = check_capture(&pcap);
    let (ab, ba) = (
        count(&flows, "127.79.3.2", "127.79.3.1"),
        count(&flows, "127.79.3.1", "127.79.3.2"),
    );
    // Each process records what it sends and what it receives: every packet twice.
    assert!(
        ab >= 2 * 20 && ba >= 2,
        "client -> server: {ab}, back: {ba}"
    );
    assert_eq!(ab % 2, 0, "client -> server: {ab}");
    assert_eq!(ba % 2, 0, "server -> client: {ba}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The drop-in library's directory, or why the compat part is skipped.
fn compat() -> Result<PathBuf, String> {
    let lib = repo().join("target/compat");
    if !lib.join("libibverbs.so.1").exists() {
        return Err(format!(
            "{} has no libibverbs.so.1 (run scripts/build-compat.sh)",
            lib.display()
        ));
    }
    Ok(lib.canonicalize().unwrap())
}

fn which(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

fn trace_lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

fn find<'a>(lines: &'a [String], words: &[&str]) -> Option<&'a String> {
    lines.iter().find(|l| words.iter().all(|w| l.contains(w)))
}

fn must<'a>(lines: &'a [String], words: &[&str], who: &str) -> &'a String {
    find(lines, words).unwrap_or_else(|| {
        panic!(
            "{who}: no trace line with {words:?} in:\n{}",
            lines.join("\n")
        )
    })
}

/// The value of `key=` in a trace line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .rev()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line}"))
}

#[test]
fn trace_of_ibv_rc_pingpong_shows_the_control_path() {
    let lib = match compat() {
        Ok(l) => l,
        Err(why) => return println!("SKIPPED: {why}"),
    };
    if !which("ibv_rc_pingpong") {
        return println!("SKIPPED: ibv_rc_pingpong not installed (ibverbs-utils)");
    }
    let dir = scratch("pingpong");
    let (st, ct) = (dir.join("server.trace"), dir.join("client.trace"));
    let port = 18762;
    let pp = |trace: &Path, dev: &str, peer: Option<&str>| {
        let mut c = Command::new(uroce());
        c.arg("trace")
            .arg("-o")
            .arg(trace)
            .args(["--", "ibv_rc_pingpong", "-g", "0", "-n", "50", "-c"])
            .args(["-p", &port.to_string()])
            .args(peer)
            .env("LD_LIBRARY_PATH", &lib)
            .env("UROCE_DEVICES", dev)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let mut server = pp(&st, "uroce0=127.79.4.1", None).spawn().unwrap();
    wait_listen(port, &mut server);
    let client = pp(&ct, "uroce0=127.79.4.2", Some("127.0.0.1"))
        .output()
        .unwrap();
    let server = server.wait_with_output().unwrap();
    ok(&client, "ibv_rc_pingpong client");
    ok(&server, "ibv_rc_pingpong server");
    let (s, c) = (trace_lines(&st), trace_lines(&ct));
    for (lines, who) in [(&s, "server"), (&c, "client")] {
        must(lines, &["GET_CONTEXT", "= ok"], who);
        must(lines, &["ALLOC_PD", "= ok pd="], who);
        must(
            lines,
            &["REG_MR", "access=LOCAL_WRITE", "= ok mr=", "lkey="],
            who,
        );
        must(lines, &["CREATE_CQ", "= ok cq="], who);
        must(lines, &["CREATE_QP", "type=RC", "= ok qp=", "qpn="], who);
        must(lines, &["MODIFY_QP", "state=INIT", "port=1", "= ok"], who);
        must(
            lines,
            &["MODIFY_QP", "state=RTR", "dest_qpn=", "path_mtu=", "= ok"],
            who,
        );
        must(lines, &["MODIFY_QP", "state=RTS", "sq_psn=", "= ok"], who);
        must(lines, &["DESTROY_QP", "= ok"], who);
        assert!(
            lines.iter().all(|l| l.contains(" = ok")),
            "{who}: a command failed:\n{}",
            lines.join("\n")
        );
    }
    // Each side's RTR names the QPN the other side's CREATE_QP returned.
    let qpn =
        |lines: &[String], who| field(must(lines, &["CREATE_QP", "= ok"], who), "qpn").to_string();
    let rtr = |lines: &[String], who| {
        field(must(lines, &["MODIFY_QP", "state=RTR"], who), "dest_qpn").to_string()
    };
    assert_eq!(rtr(&s, "server"), qpn(&c, "client"));
    assert_eq!(rtr(&c, "client"), qpn(&s, "server"));
    // The RTR's address vector is the peer device's address.
    assert!(must(&s, &["MODIFY_QP", "state=RTR"], "server").contains("dgid=127.79.4.2"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_shows_a_failing_modify_qp_with_its_reason() {
    let lib = match compat() {
        Ok(l) => l,
        Err(why) => return println!("SKIPPED: {why}"),
    };
    if !Path::new("/usr/include/infiniband/verbs.h").exists() || !which("cc") {
        return println!(
            "SKIPPED: a C compiler and /usr/include/infiniband/verbs.h (libibverbs-dev) are needed"
        );
    }
    let dir = scratch("modify");
    let exe = dir.join("modify_reset_rts");
    // Compiled against rdma-core's headers and library, run on the drop-in one.
    let cc = Command::new("cc")
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(repo().join("tests/compat/modify_reset_rts.c"))
        .arg("-libverbs")
        .output()
        .unwrap();
    ok(&cc, "cc tests/compat/modify_reset_rts.c");
    let trace = dir.join("t.trace");
    let out = Command::new(uroce())
        .arg("trace")
        .arg("-o")
        .arg(&trace)
        .arg("--")
        .arg(&exe)
        .env("LD_LIBRARY_PATH", &lib)
        .env("UROCE_DEVICES", "uroce0=127.79.5.1")
        .output()
        .unwrap();
    ok(&out, "modify_reset_rts under uroce trace");
    let lines = trace_lines(&trace);
    let line = must(
        &lines,
        &[
            "MODIFY_QP",
            "mask=STATE | SQ_PSN",
            "state=RTS",
            "= EINVAL (errno 22): ",
        ],
        "modify_reset_rts",
    );
    assert!(line.contains("[ILLEGAL_TRANSITION]"), "{line}");
    assert!(line.contains("RESET -> RTS"), "{line}");
    // Everything else the program did succeeded, and the QP was still RESET.
    must(
        &lines,
        &["QUERY_QP", "= ok state=RESET"],
        "modify_reset_rts",
    );
    assert_eq!(
        lines.iter().filter(|l| !l.contains(" = ok")).count(),
        1,
        "{}",
        lines.join("\n")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn trace_to_stderr_by_default_and_capture_needs_a_command() {
    let out = Command::new(uroce())
        .args(["trace", "--", uroce(), "devinfo"])
        .env("UROCE_DEVICES", "uroce0=127.79.6.1")
        .output()
        .unwrap();
    ok(&out, "uroce trace -- uroce devinfo");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.lines().any(|l| l.starts_with("uroce-trace ")
            && l.contains(" uroce0 ctx=")
            && l.contains("QUERY_DEVICE = ok")),
        "{err}"
    );
    // Without a command: a usage error, nothing run.
    let out = Command::new(uroce())
        .args(["capture", "-o", "/nonexistent/x.pcap"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // The command's exit status is passed on.
    let out = Command::new(uroce())
        .args(["trace", "--", "sh", "-c", "exit 7"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7));
}

/// Wait until `path` exists (a process's attach socket), or panic after 30 s.
fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A `uroce bench write_bw` running for `secs` seconds with the given placement args,
/// publishing in `stats`; returns it once its attach socket is there.
fn running_bench(stats: &Path, place: &[&str], secs: u32) -> Child {
    let child = Command::new(uroce())
        .args(["bench", "write_bw", "-s", "8192", "-D", &secs.to_string()])
        .args(place)
        .env("UROCE_DEVICES", "uroce0=127.79.20.1")
        .env("UROCE_STATS_DIR", stats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&stats.join(format!("{}.attach", child.id())));
    child
}

fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// `uroce capture -p PID -w FILE -c N` beside a bench that runs on its own (the capture
/// opens no device): same-device loopback and two devices over UDP both make wire
/// captures; a filter keeps only what it names.
#[test]
fn capture_attaches_beside_a_running_bench() {
    let dir = scratch("attach");
    let stats = dir.join("stats");
    std::fs::create_dir_all(&stats).unwrap();
    let capture = |pid: u32, file: &Path, n: u32, filter: &[&str]| {
        let out = Command::new(uroce())
            .args([
                "capture",
                "-p",
                &pid.to_string(),
                "-c",
                &n.to_string(),
                "-w",
            ])
            .arg(file)
            .args(filter)
            .env("UROCE_STATS_DIR", &stats)
            .output()
            .unwrap();
        ok(&out, "uroce capture -p");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("attached to uroce (pid {pid})")),
            "{err}"
        );
        assert!(err.contains(&format!("{n} packets captured")), "{err}");
    };

    let lb = running_bench(&stats, &["--loopback"], 30);
    let file = dir.join("lb.pcap");
    capture(lb.id(), &file, 300, &[]);
    let flows = check_capture(&file);
    assert_eq!(flows.len(), 300);
    assert_eq!(
        count(&flows, "127.79.20.1", "127.79.20.1"),
        300,
        "{flows:?}"
    );
    // Only ACKs: every packet kept is one.
    let acks = dir.join("acks.pcap");
    capture(lb.id(), &acks, 20, &["op", "ack"]);
    let recs = decode(&acks);
    assert_eq!(recs.len(), 20);
    assert!(
        recs.iter()
            .all(|r| r["opcode_name"].as_str().is_some_and(|o| o.contains("ACK"))),
        "{recs:?}"
    );
    stop(lb);

    let pair = running_bench(&stats, &["--pair", "127.79.21.1,127.79.21.2"], 30);
    let file = dir.join("pair.pcap");
    capture(pair.id(), &file, 400, &[]);
    let flows = check_capture(&file);
    let (ab, ba) = (
        count(&flows, "127.79.21.1", "127.79.21.2"),
        count(&flows, "127.79.21.2", "127.79.21.1"),
    );
    assert!(ab > 0 && ba > 0, "{ab} {ba}");
    assert_eq!(ab + ba, 400);
    stop(pair);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `uroce trace -p PID --fast` attached to a waiting `uroce pingpong` server: the commands
/// it sends once a client connects (with results and times), fast-path events with CQE
/// statuses, and the trace ends when the server exits.
#[test]
fn trace_attaches_beside_a_running_server() {
    let dir = scratch("trace-attach");
    let stats = dir.join("stats");
    std::fs::create_dir_all(&stats).unwrap();
    let pingpong = ["pingpong", "rc", "-g", "0", "-n", "200", "-p", "18763"];
    let server = Command::new(uroce())
        .args(pingpong)
        .env("UROCE_DEVICES", "uroce0=127.79.22.1")
        .env("UROCE_STATS_DIR", &stats)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_file(&stats.join(format!("{}.attach", server.id())));
    let out_file = dir.join("trace.txt");
    let mut tracer = Command::new(uroce())
        .args(["trace", "--fast", "-p", &server.id().to_string(), "-o"])
        .arg(&out_file)
        .env("UROCE_STATS_DIR", &stats)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Go on once the tracer says it is attached.
    let mut err = std::io::BufReader::new(tracer.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("attached to") {
        let mut l = String::new();
        let n = std::io::BufRead::read_line(&mut err, &mut l).unwrap();
        assert!(n > 0, "tracer ended before attaching: {said}");
        said.push_str(&l);
    }
    let client = Command::new(uroce())
        .args(pingpong)
        .arg("127.79.22.1")
        .env("UROCE_DEVICES", "uroce1=127.79.22.2")
        .env("UROCE_STATS_DIR", &stats)
        .output()
        .unwrap();
    ok(&client, "uroce pingpong client");
    let mut server = server;
    assert!(server.wait().unwrap().success());
    // The server's exit ends the trace.
    let start = Instant::now();
    let status = loop {
        if let Some(s) = tracer.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "tracer did not end"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success());
    let text = std::fs::read_to_string(&out_file).unwrap();
    let pid = format!("pid={}", server.id());
    let modify: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("uroce-trace ") && l.contains(" MODIFY_QP "))
        .collect();
    assert!(!modify.is_empty(), "{text}");
    for l in &modify {
        assert!(l.contains(&pid) && l.contains(" = ok"), "{l}");
        // The time the command took, as strace -T prints it.
        let t = l.rsplit_once(" <").map(|(_, t)| t).unwrap_or("");
        assert!(
            t.ends_with('>') && t.trim_end_matches('>').parse::<f64>().is_ok(),
            "{l}"
        );
    }
    assert!(
        text.lines().any(|l| l.starts_with("uroce-fast ")
            && l.contains(" CQE ")
            && l.contains("status=0 (success)")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("uroce-fast ") && l.contains(" WQE ")),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
