//! `uroce pingpong rc|ud|srq` between two `uroce` processes on two loopback addresses:
//! the exchange pairs them, the address lines carry their GIDs and QPNs crosswise, and
//! both print the result lines. Timings are never asserted.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

struct Side {
    stdout: String,
    stderr: String,
    ok: bool,
}

/// Runs a server on 127.77.`net`.1 and a client on 127.77.`net`.2.
fn pair(variant: &str, port: &str, net: &str, extra: &[&str]) -> (Side, Side) {
    let exe = env!("CARGO_BIN_EXE_uroce");
    let mut server = Command::new(exe)
        .env("UROCE_DEVICES", format!("uroce0=127.77.{net}.1"))
        .args(["pingpong", variant, "-p", port, "--timeout", "30"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let out = server.stdout.take().expect("piped");
    let (ready_tx, ready_rx) = mpsc::channel();
    let (all_tx, all_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut r = BufReader::new(out);
        let (mut all, mut line) = (String::new(), String::new());
        while r.read_line(&mut line).unwrap_or(0) > 0 {
            // The server listens before it prints its address.
            if line.contains("local address:") {
                let _ = ready_tx.send(());
            }
            all.push_str(&line);
            line.clear();
        }
        let _ = all_tx.send(all);
    });
    if ready_rx.recv_timeout(Duration::from_secs(30)).is_err() {
        let _ = server.kill();
        let mut e = String::new();
        if let Some(mut s) = server.stderr.take() {
            let _ = s.read_to_string(&mut e);
        }
        panic!("server did not start: {e}");
    }
    let client = Command::new(exe)
        .env("UROCE_DEVICES", format!("uroce1=127.77.{net}.2"))
        .args([
            "pingpong",
            variant,
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
    let mut err = String::new();
    if let Some(mut s) = server.stderr.take() {
        let _ = s.read_to_string(&mut err);
    }
    (
        Side {
            stdout: all_rx.recv().unwrap_or_default(),
            stderr: err,
            ok: status.success(),
        },
        Side {
            stdout: String::from_utf8_lossy(&client.stdout).to_string(),
            stderr: String::from_utf8_lossy(&client.stderr).to_string(),
            ok: client.status.success(),
        },
    )
}

/// (QPN, GID text) of every `prefix` line.
fn addresses(out: &str, prefix: &str) -> Vec<(String, String)> {
    out.lines()
        .filter(|l| l.starts_with(prefix))
        .map(|l| {
            let qpn = l
                .split("QPN ")
                .nth(1)
                .and_then(|r| r.split(',').next())
                .unwrap_or_default()
                .to_string();
            let gid = l.rsplit("GID ").next().unwrap_or_default().to_string();
            (qpn, gid)
        })
        .collect()
}

fn check(variant: &str, port: &str, net: &str, iters: u32, size: u32, qps: usize) {
    let n = iters.to_string();
    let s = size.to_string();
    let mut extra = vec!["-n", &n, "-s", &s];
    let q = qps.to_string();
    if variant == "srq" {
        extra.extend_from_slice(&["-q", &q]);
    }
    let (server, client) = pair(variant, port, net, &extra);
    assert!(server.ok, "server:\n{}\n{}", server.stdout, server.stderr);
    assert!(client.ok, "client:\n{}\n{}", client.stdout, client.stderr);
    let local_prefix = "  local address:  LID 0x0000, QPN 0x";
    let remote_prefix = "  remote address: LID 0x0000, QPN 0x";
    let (sl, sr) = (
        addresses(&server.stdout, local_prefix),
        addresses(&server.stdout, remote_prefix),
    );
    let (cl, cr) = (
        addresses(&client.stdout, local_prefix),
        addresses(&client.stdout, remote_prefix),
    );
    assert_eq!(sl.len(), qps, "{}", server.stdout);
    assert_eq!(cl.len(), qps, "{}", client.stdout);
    // Each side's remote lines are the other's local lines (QPN; the GID is its device's).
    assert_eq!(
        sr.iter().map(|a| &a.0).collect::<Vec<_>>(),
        cl.iter().map(|a| &a.0).collect::<Vec<_>>()
    );
    assert_eq!(
        cr.iter().map(|a| &a.0).collect::<Vec<_>>(),
        sl.iter().map(|a| &a.0).collect::<Vec<_>>()
    );
    let server_gid = format!("::ffff:127.77.{net}.1");
    let client_gid = format!("::ffff:127.77.{net}.2");
    assert!(sl.iter().all(|a| a.1 == server_gid) && cr.iter().all(|a| a.1 == server_gid));
    assert!(cl.iter().all(|a| a.1 == client_gid) && sr.iter().all(|a| a.1 == client_gid));
    let bytes = u64::from(size) * u64::from(iters) * 2;
    for out in [&server.stdout, &client.stdout] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{bytes} bytes in ")) && l.ends_with(" Mbit/sec")),
            "{out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("{iters} iters in ")) && l.ends_with(" usec/iter")),
            "{out}"
        );
    }
    if variant == "ud" {
        // ibv_ud_pingpong's local line has "PSN 0x......: GID".
        assert!(client.stdout.contains(": GID ::ffff:"), "{}", client.stdout);
    }
}

#[test]
fn rc_pingpong_between_processes() {
    check("rc", "19621", "60", 50, 4096, 1);
}

#[test]
fn ud_pingpong_between_processes() {
    check("ud", "19622", "61", 50, 1024, 1);
}

#[test]
fn srq_pingpong_between_processes() {
    check("srq", "19623", "62", 60, 512, 4);
}

#[test]
fn rc_pingpong_events_and_check() {
    let (server, client) = pair("rc", "19624", "63", &["-n", "20", "-s", "100", "-e", "-c"]);
    assert!(
        server.ok && client.ok,
        "{}\n{}\n{}\n{}",
        server.stdout,
        server.stderr,
        client.stdout,
        client.stderr
    );
    assert!(!client.stdout.contains("invalid data"), "{}", client.stdout);
}

#[test]
fn client_without_server_fails() {
    let out = Command::new(env!("CARGO_BIN_EXE_uroce"))
        .env("UROCE_DEVICES", "uroce0=127.77.64.1")
        .args(["pingpong", "127.77.64.2", "-p", "19625", "-n", "5"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Couldn't connect to 127.77.64.2:19625"));
}
