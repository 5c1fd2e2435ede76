//! Fuzz what `uroced` reads from outside: a client's request bytes (the daemon protocol's
//! decoder, which must round-trip what it accepts) and received datagrams (the routing of a
//! RoCEv2 payload to a client by QP window, CM service ID or CM ID prefix).
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = abi::fuzzing::decode_daemon_message(data);
    let listens: HashMap<u64, u64> = [(0x0106_4e20, 7)].into_iter().collect();
    let slots: HashMap<u32, u64> = [(1, 7), (2, 8)].into_iter().collect();
    let _ = nic::daemon::classify(data, &listens, &slots);
});
