//! Fuzz every `wire` parser: IP/UDP/RoCEv2 frames, UDP datagrams, transport packets and each
//! header on its own. `wire::fuzzing::parse_any` panics when a successful parse does not
//! re-emit the input; the stable test `fuzz_entry_on_random_inputs` in crates/wire runs it too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::parse_any(data);
});
