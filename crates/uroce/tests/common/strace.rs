//! Counting a command's system calls with `strace -f -c` (all its threads together), for
//! the "no system call per operation" tests.

use std::process::Command;

/// Whether `strace` can be run here.
pub fn available() -> bool {
    Command::new("strace").arg("-V").output().is_ok()
}

/// Run `cmd` (a program and its arguments and environment, not yet started) under
/// `strace -f -c`; panics if it fails. Returns the calls of strace's `total` line and
/// strace's whole table.
pub fn count_calls(cmd: &Command, tag: &str) -> (u64, String) {
    let out = std::env::temp_dir().join(format!("uroce-strace-{}-{tag}", std::process::id()));
    let mut s = Command::new("strace");
    s.arg("-f")
        .arg("-c")
        .arg("-o")
        .arg(&out)
        .arg(cmd.get_program());
    s.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => s.env(k, v),
            None => s.env_remove(k),
        };
    }
    s.stdout(std::process::Stdio::null());
    let status = s.status().expect("run strace");
    assert!(status.success(), "{tag}: {cmd:?} failed: {status}");
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
    (calls, text)
}
