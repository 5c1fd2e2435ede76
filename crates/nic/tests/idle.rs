//! An idle device costs no CPU: after traffic stops the engine parks (announcing it on
//! the doorbell page) instead of spinning. Its own test binary, so no other test keeps the
//! shared engine busy.

mod common;

use std::time::{Duration, Instant};

use abi::{AccessFlags, QpType, WrOpcode};
use common::*;
use zerocopy::IntoBytes;

/// CPU time (user + system, in clock ticks) of this process's threads whose name starts
/// with `prefix`.
fn thread_ticks(prefix: &str) -> Option<u64> {
    let mut total = None;
    for t in std::fs::read_dir("/proc/self/task").ok()? {
        let p = t.ok()?.path();
        let comm = std::fs::read_to_string(p.join("comm")).ok()?;
        if !comm.trim().starts_with(prefix) {
            continue;
        }
        let stat = std::fs::read_to_string(p.join("stat")).ok()?;
        // Fields after the parenthesised name: state is field 3; utime 14, stime 15.
        let rest = stat.rsplit_once(')')?.1;
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime: u64 = f.get(11)?.parse().ok()?;
        let stime: u64 = f.get(12)?.parse().ok()?;
        *total.get_or_insert(0) += utime + stime;
    }
    total
}

#[test]
fn idle_engine_parks_and_uses_no_cpu() {
    let ip = "127.77.5.1";
    let dev = device("idle0", ip);
    let mut buf = vec![0u8; 4096];
    let mut c = Client::connect(&dev);
    let all = AccessFlags::LOCAL_WRITE.0 | AccessFlags::REMOTE_WRITE.0;
    let pd = c.alloc_pd();
    let m = c.reg_mr(pd, &mut buf, all).unwrap();
    let ba = buf.as_ptr() as u64;
    let mut cq = c.create_cq(16, -1, 1).unwrap();
    let (mut a, _b) = c.connected(pd, (cq.handle, cq.handle), QpType::Rc, 8, ip);
    for i in 0..100 {
        c.post_send(
            &mut a,
            write_wqe(i, WrOpcode::RdmaWrite, ba + 1024, m.rkey),
            sge(ba, 64, m.lkey).as_bytes(),
        );
        assert_eq!(poll(&mut cq).status, 0);
    }
    let deadline = Instant::now() + TIMEOUT;
    while !c.parked() {
        assert!(Instant::now() < deadline, "engine never parked");
        std::thread::sleep(Duration::from_millis(1));
    }
    let before = thread_ticks("uroce-engine").expect("engine thread found");
    std::thread::sleep(Duration::from_millis(500));
    let after = thread_ticks("uroce-engine").unwrap();
    // A spinning engine would accumulate ~50 ticks (100 Hz) in 500 ms.
    assert!(
        after - before <= 5,
        "engine used {} ticks while idle",
        after - before
    );
    assert!(c.parked());
    c.close();
}
