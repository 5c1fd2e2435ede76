//! "Fast path: post_send, post_recv and poll_cq make no system call in steady state"
//! (issue 4): under `strace -f -c`, a same-device loop of 200,000 8-byte RDMA WRITEs makes
//! no more system calls, all threads together, than a loop of 20,000, up to a small
//! constant.
//!
//! The test re-runs its own binary as the child (`write_loop_child`, active only when
//! `UROCE_SYSCALL_CHILD_WRITES` is set) under strace, once per loop length, and compares
//! strace's `total` call counts. Without strace it says so and passes.

mod common;

use std::process::Command;

use common::*;
use uroce::*;

const CHILD_ENV: &str = "UROCE_SYSCALL_CHILD_WRITES";

/// Largest difference allowed between the two runs' totals: setup and teardown are the
/// same in both, and an engine that parks now and then may add a few wake-ups — but a
/// system call per operation would add 180,000.
const SLACK: u64 = 400;

/// The child: `n` 8-byte RDMA WRITEs on one device, up to 64 outstanding, every 32nd
/// signaled, polling the CQ ring.
#[test]
fn write_loop_child() {
    let Some(n) = std::env::var(CHILD_ENV).ok().and_then(|v| v.parse::<u64>().ok()) else {
        return;
    };
    let (a, b) = rc(Topo::SameDevice);
    let src = buf(&a, 8);
    let dst = buf(&b, 8 * 64);
    let rm = dst.remote();
    let sge = [src.sge(0, 8)];
    let mut wc = [Wc::default(); 16];
    let (mut posted, mut done) = (0u64, 0u64);
    const DEPTH: u64 = 64;
    const SIGNAL_EVERY: u64 = 32;
    while done < n {
        while posted < n && posted - done < DEPTH {
            let mut wr = SendWr::write(posted, &sge, rm.at((posted % 64) * 8), rm.rkey);
            if posted % SIGNAL_EVERY == SIGNAL_EVERY - 1 || posted == n - 1 {
                wr = wr.signaled();
            }
            a.qp.post_send(&[wr]).expect("post_send");
            posted += 1;
        }
        let k = a.cq.poll(&mut wc).expect("poll");
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::SUCCESS, "{w:?}");
            done = w.wr_id + 1;
        }
    }
    println!("child: {n} writes done");
}

fn strace_total(n: u64) -> u64 {
    let exe = std::env::current_exe().expect("own path");
    let out = std::env::temp_dir().join(format!("uroce-strace-{}-{n}.txt", std::process::id()));
    let status = Command::new("strace")
        .arg("-f")
        .arg("-c")
        .arg("-o")
        .arg(&out)
        .arg(&exe)
        .args(["--exact", "write_loop_child", "--test-threads=1", "--nocapture"])
        .env(CHILD_ENV, n.to_string())
        .status()
        .expect("run strace");
    assert!(status.success(), "child with {n} writes failed: {status}");
    let text = std::fs::read_to_string(&out).expect("strace output");
    let _ = std::fs::remove_file(&out);
    let total = text
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .unwrap_or_else(|| panic!("no total line in strace output:\n{text}"));
    // "% time  seconds  usecs/call  calls  [errors]  syscall": calls is the 4th column.
    let calls = total
        .split_whitespace()
        .nth(3)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("cannot parse `{total}`"));
    eprintln!("{n} writes: {calls} system calls in total\n{text}");
    calls
}

#[test]
fn fast_path_makes_no_system_calls_in_steady_state() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("SKIPPED: strace is not installed (apt-get install -y strace)");
        return;
    }
    let small = strace_total(20_000);
    let large = strace_total(200_000);
    assert!(
        large <= small + SLACK,
        "200,000 WRITEs made {large} system calls, 20,000 made {small}: the fast path is \
         making system calls per operation"
    );
}
