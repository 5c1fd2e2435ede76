//! Fuzz the Communication Manager MAD decoder (`wire::cm`): REQ … SIDR_REP and rdma_cm's
//! `cma_hdr`. `wire::fuzzing::cm_mad` panics when a parsed MAD does not re-emit to the same
//! value; the stable test `fuzz_entry_on_random_inputs` in crates/wire runs it too.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    wire::fuzzing::cm_mad(data);
});
