//! Fuzz the control plane: arbitrary sequences of framed uverbs commands against a live
//! context of a sealed in-process device (its own control-plane thread and the engine
//! doing real work), then the context is closed and every object and file descriptor must
//! be reclaimed. The same function runs in nic's stable test `tests/fuzz_commands.rs` on
//! random and mutated inputs (input format: `nic::fuzzing` docs; a starting corpus:
//! `NIC_FUZZ_CORPUS=dir cargo test -p nic --test fuzz_commands`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nic::fuzzing::execute(data);
});
