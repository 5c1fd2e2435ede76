//! `uroce bench` makes no system call per operation: under `strace -f -c`, `uroce bench
//! write_bw --loopback -s 8 -n 200000` makes no more calls, all threads together, than
//! `-n 20000`, up to a small constant (docs/architecture.md §3). Its own test binary, so
//! that no other test's processes take the cores meanwhile: a bench that finds itself
//! preempted yields while it waits, by design. Without strace it says so and passes.

use std::process::Command;

/// Setup and teardown are the same in both runs; an engine that parks now and then, or a
/// wait that finds itself preempted, may add a few calls — a call per operation would add
/// 180,000, a yield per wait every 256 empty polls thousands (6,435 seen). With two other
/// builds taking the cores, 1,267 more were seen: the bound holds on a machine that leaves
/// the bench its cores, as CI runs this binary alone.
const SLACK: u64 = 1_000;

#[path = "../../uroce/tests/common/strace.rs"]
mod strace;

fn strace_calls(n: u64) -> u64 {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_uroce"));
    cmd.args(["bench", "write_bw", "--loopback", "-s", "8", "-n"])
        .arg(n.to_string())
        .args(["--timeout", "60"])
        .env("UROCE_DEVICES", "uroce0=127.0.0.93")
        .env("UROCE_DAEMON", "0");
    strace::count_calls(&cmd, &format!("bench-{n}")).0
}

#[test]
fn loopback_write_bw_system_calls_do_not_grow_with_the_run() {
    if !strace::available() {
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
