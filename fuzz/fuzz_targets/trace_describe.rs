//! Fuzz the command trace's formatter (`nic::trace::describe`, what `uroce trace` prints) on
//! an arbitrary request and reply: the first byte splits the input. It must never panic.
//! The `nic_commands` target (and its stable test) also formats every command it runs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nic::fuzzing::describe_pair(data);
});
