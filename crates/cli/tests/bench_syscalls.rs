//! `uroce bench` makes no system call per operation: under `strace -f -c`, `uroce bench
//! write_bw --loopback -s 8 -n 200000` makes no more calls, all threads together, than
//! `-n 20000`, up to a small constant (docs/architecture.md §3). Its own test binary, so
//! that no other test's processes take the cores meanwhile: a bench that finds itself
//! preempted yields while it waits, by design. Without strace it says so and passes.

use std::process::Command;

/// Setup and teardown are the same in both runs; an engine that parks now and then, or a
/// wait that finds itself preempted, may add a few calls — a call per operation would add
/// 180,000, a yield per completion (every 100th operation, perftest's default) 1,800.
const SLACK: u64 = 600;

fn strace_calls(n: u64) -> u64 {
    let out = std::env::temp_dir().join(format!("uroce-bench-strace-{}-{n}", std::process::id()));
    let status = Command::new("strace")
        .arg("-f")
        .arg("-c")
        .arg("-o")
        .arg(&out)
        .arg(env!("CARGO_BIN_EXE_uroce"))
        .args(["bench", "write_bw", "--loopback", "-s", "8", "-n"])
        .arg(n.to_string())
        .args(["--timeout", "60"])
        .env("UROCE_DEVICES", "uroce0=127.0.0.93")
        .env("UROCE_DAEMON", "0")
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run strace");
    assert!(status.success(), "uroce bench with -n {n} failed: {status}");
    let text = std::fs::read_to_string(&out).expect("strace output");
    let _ = std::fs::remove_file(&out);
    let total = text
        .lines()
        .find(|l| l.trim_end().ends_with("total"))
        .unwrap_or_else(|| panic!("no total line in strace output:\n{text}"));
    // "% time  seconds  usecs/call  calls  [errors]  total": calls is the 4th column.
    total
        .split_whitespace()
        .nth(3)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("unreadable total line: {total}"))
}

#[test]
fn loopback_write_bw_system_calls_do_not_grow_with_the_run() {
    if Command::new("strace").arg("-V").output().is_err() {
        eprintln!("strace not installed: skipped");
        return;
    }
    let small = strace_calls(20_000);
    let large = strace_calls(200_000);
    assert!(
        large <= small + SLACK,
        "200,000 WRITEs made {large} system calls, 20,000 made {small}: more than {SLACK} apart"
    );
}
